"""Bad input: one line on stderr, exit code 2, and the fix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ringleader.cli.main import main


@pytest.mark.parametrize(("argv", "needle"), [
    (["bench", "allreduce", "--backend", "ucc"], "is not one of 'gloo', 'mpi', 'nccl'"),
    (["bench", "allreduce", "-b", "1M", "-e", "1K"], "larger than -e"),
    (["bench", "allreduce", "-np", "65"], "-np 65"),
    (["bench", "allreduce", "-np", "999", "--backend", "mpi"], "-np 999"),
    (["bench", "allreduce", "--backend", "nccl", "-np", "2"], "CUDA"),
    (["bench", "allreduce", "-d", "int8"], "float, half or bfloat16"),
    (["bench", "train", "--model", "lenet"], "resnet50"),
    (["bench", "train", "--backend", "smoke"], "is not one of 'gloo', 'mpi', 'nccl'"),
    (["bench", "train", "--precision", "fp8"], "fp32"),
    (["bench", "scaling", "--workers", "1,x", "--out", "o"], "--workers"),
])  # fmt: skip
def test_bad_input_exits_2(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and needle in err


def test_data_dir_without_images(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cls").mkdir()
    assert main(["bench", "train", "--data", str(tmp_path)]) == 2
    assert "no images" in capsys.readouterr().err


def test_mpi_without_mpirun_says_how_to_install(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert main(["bench", "allreduce", "--backend", "mpi", "-np", "2"]) == 2
    err = capsys.readouterr().err
    assert "apt-get install openmpi-bin libopenmpi-dev" in err and "ringleader[bench]" in err


def test_env_reports_the_lab_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "-o", "json"]) == 0
    info = json.loads(capsys.readouterr().out)
    for key in ("servers", "nics", "gpu_model", "gpu_count", "gpu_connection", "os",
                "gpu_driver", "cuda", "nccl", "mpi", "framework", "packages"):  # fmt: skip
        assert key in info
    assert info["packages"]["torch"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 (a netns)")
def test_env_counts_network_cards_not_virtual_interfaces() -> None:
    """In a network namespace with only virtual interfaces (a veth pair whose end is named like
    a card, as a container's eth0 is; a bridge; an ifb), `env` counts no NIC and names them
    apart as virtual."""
    netns = f"rl-nics-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        for link in (["eth7", "type", "veth", "peer", "name", "veth7"], ["rlbr0", "type", "bridge"],
                     ["ib9", "type", "ifb"]):  # fmt: skip
            subprocess.run(["ip", "-n", netns, "link", "add", *link], check=True)
        shown = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-m", "ringleader.cli.main", "env",
                                "-o", "json"], capture_output=True, text=True, check=True)  # fmt: skip
        assert json.loads(shown.stdout)["nics"] == "none found (virtual only: eth7, ib9, rlbr0, veth7)"
    finally:
        subprocess.run(["ip", "netns", "delete", netns], check=False)
