"""The local node is read as an ssh host is: `nvidia-smi topo -m` (links, NICs, CPU and NUMA
affinity), else NVML. Contract test: a stand-in `nvidia-smi` on PATH prints a real machine's
output (the reference material) and answers `--query-gpu=name` as the real one does."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from refdata import reference_file
from ringleader.engines.embedded.nodes import local_node


def stand_in(folder: Path, topo: Path, name: str, fail: bool = False) -> None:
    smi = folder / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        + ("exit 9\n" if fail else "")
        + f'case "$1" in topo) cat {topo} ;; --query-gpu=name) for i in 1 2 3 4 5 6 7 8; do echo "{name}"; done ;;'
        " *) exit 2 ;; esac\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)


def test_local_node_takes_affinity_and_nics_from_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    topo = reference_file("a100_sxm_8gpu_nv12_17nics.txt")
    stand_in(tmp_path, topo, "NVIDIA A100-SXM4-80GB")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    spec, note = local_node()
    assert note == "" and spec.name == "local"
    assert spec.topology.n_gpus == 8 and spec.topology.gpu_model == "A100"
    assert spec.topology.source == "nvidia-smi topo -m"
    assert spec.topology.cpu_affinity and all(spec.topology.cpu_affinity)  # what NVML's matrix lacks
    assert spec.topology.nic_links


def test_a_failing_nvidia_smi_falls_back_to_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(tmp_path, tmp_path / "absent.txt", "NVIDIA A100-SXM4-80GB", fail=True)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    spec, note = local_node()
    assert spec.topology.source != "nvidia-smi topo -m"
    assert spec.topology.n_gpus > 0 or note  # no GPU here: NVML's reason says why
