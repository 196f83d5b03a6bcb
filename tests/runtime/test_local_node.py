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
from ringleader.jobs.states import InstanceStatus
from waiting import wait_for


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


def usage_stand_in(folder: Path, topo: Path) -> None:
    """nvidia-smi answering `topo -m` with a real machine's output and the usage query as the
    real one does (GPU 1 busy, the others idle; GPU 7 unreadable, as `[N/A]` rows come)."""
    smi = folder / "nvidia-smi"
    rows = "".join(f"{i}, {97 if i == 1 else 0}, {30512 if i == 1 else 3}, 81920\\n" for i in range(7))
    smi.write_text(
        "#!/bin/sh\n"
        f'case "$1" in topo) cat {topo} ;; --query-gpu=name) echo "NVIDIA A100-SXM4-80GB" ;;\n'
        f'  --query-gpu=index,utilization.gpu,memory.used,memory.total) printf "{rows}7, [N/A], [N/A], 81920\\n" ;;\n'
        "  *) exit 2 ;; esac\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)


def test_get_g_shows_each_instances_gpu_duty_cycle_and_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    import sys

    from ringleader.cli.main import main
    from ringleader.engines.embedded.engine import Runtime
    from ringleader.jobs.spec import JobSpec

    usage_stand_in(tmp_path, reference_file("a100_sxm_8gpu_nv12_17nics.txt"))
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("RINGLEADER_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    with Runtime.open(tmp_path / "home") as rt:
        rt.submit(JobSpec("busy", 2, 1, [sys.executable, "-c", "import time; time.sleep(60)"]))
        def running() -> bool:
            job = rt.get("busy")
            assert not any(InstanceStatus(i.status).is_terminal() for i in job.instances), job
            return all(i.status == "Running" for i in job.instances)

        wait_for(running, what="both ranks to run")
        gpus = [i.gpus for i in rt.get("busy").instances]
        usage = rt.gpu_usage("busy")
        try:
            capsys.readouterr()
            assert main(["get", "busy", "-g"]) == 0
            shown = capsys.readouterr().out
        finally:
            rt.delete(["busy"])
    for inst, (gpu,) in zip(sorted(usage), gpus, strict=True):
        (one,) = usage[inst] or ()
        assert one.gpu == gpu and one.memory_total_mib == 81920
        assert (one.duty_cycle_pct, one.memory_used_mib) == ((97, 30512) if gpu == 1 else (0, 3))
    assert "GPU(DutyCycle)" in shown and "GPU_MEMORY" in shown and "MiB/81920MiB" in shown


def test_gpu_usage_is_na_on_emulated_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from ringleader.engines.embedded.engine import Runtime
    from ringleader.jobs.spec import JobSpec

    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text("nodes:\n  - name: box\n    preset: pcie-4gpu-workstation\n    emulated: true\n")
    with Runtime.open(tmp_path / "home") as rt:
        rt.apply_cluster(tmp_path / "c.yaml")
        rt.submit(JobSpec("virtual", 2, 1, [sys.executable, "-c", "import time; time.sleep(60)"]))
        try:
            assert rt.gpu_usage("virtual") == {"virtual-worker-0": None, "virtual-worker-1": None}
        finally:
            rt.delete(["virtual"])


def test_usage_rows_nvidia_smi_cannot_read_are_left_out() -> None:
    from ringleader.topology.nvml import parse_usage_csv

    text = "0, 45, 1024, 81559\n1, [N/A], [N/A], 81559\n2, 3\n"
    assert parse_usage_csv(text) == {0: (45.0, 1024.0, 81559.0)}


def health_stand_in(folder: Path, topo: Path) -> None:
    """nvidia-smi answering `topo -m` with a real 8-GPU machine's output and the health query as
    the real one does: GPU 2 has failed row remapping, GPU 5 is off the bus (named on stderr,
    no row), the others are fine (`[N/A]` where a field does not apply)."""
    smi = folder / "nvidia-smi"
    rows = "".join(f"{i}, No, {'Yes' if i == 2 else 'No'}, {'Yes' if i == 2 else 'No'}\\n" for i in range(8) if i != 5)
    smi.write_text(
        "#!/bin/sh\n"
        f'case "$1" in topo) cat {topo} ;; --query-gpu=name) echo "NVIDIA A100-SXM4-80GB" ;;\n'
        f'  --query-gpu=index,retired_pages.pending,remapped_rows.pending,remapped_rows.failure) printf "{rows}";'
        ' echo "Unable to determine the device handle for GPU 0000:90:00.0: Unknown Error" >&2; exit 15 ;;\n'
        "  *) exit 2 ;; esac\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)


def test_top_node_counts_the_unhealthy_gpus_of_this_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """Contract test (a stand-in nvidia-smi, as NVML is absent here): the GPU whose rows could not
    be remapped and the GPU that fell off the bus are the node's 2 unhealthy GPUs."""
    from ringleader.cli.main import main

    health_stand_in(tmp_path, reference_file("a100_sxm_8gpu_nv12_17nics.txt"))
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("RINGLEADER_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["top", "node"]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert header.split() == ["NAME", "IPADDRESS", "STATUS", "GPU(Total)", "GPU(Allocated)", "UNHEALTHY", "MODE"]
    assert row.split() == ["local", "127.0.0.1", "Ready", "8", "0", "2", "both"]


def test_health_rows_and_no_answer() -> None:
    from ringleader.topology.nvml import parse_health_csv

    assert parse_health_csv("0, No, No, No\n1, No, [N/A], [N/A]\n", 2) == 0  # a V100 has no row remapping
    assert parse_health_csv("0, Yes, [N/A], [N/A]\n1, [GPU requires reset], No, No\n", 2) == 2
    assert parse_health_csv("0, No, No, No\n", 4) == 3  # three GPUs nvidia-smi no longer lists
    assert parse_health_csv("", 8) is None  # no nvidia-smi
    assert parse_health_csv('Field "remapped_rows.pending" is not a valid field to query.\n', 8) is None  # old driver


class FakeNvml:
    """Contract stand-in for pynvml with the calls unhealthy_gpus() makes, answering as NVML does:
    GPU 0 fine on Ampere (retired pages NotSupported), GPU 1 with a row remap pending, GPU 2 a
    Volta with retired pages pending (row remapping NotSupported), GPU 3 lost (no handle)."""

    NVML_FEATURE_ENABLED = 1

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    class NVMLError_GpuIsLost(NVMLError):
        pass

    def __init__(self) -> None:
        self.shutdown = False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        return 4

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i == 3:
            raise self.NVMLError_GpuIsLost()
        return i

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        if h != 2:
            raise self.NVMLError_NotSupported()
        return 1

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        if h == 2:
            raise self.NVMLError_NotSupported()
        return (0, 1, 1, 0) if h == 1 else (0, 0, 0, 0)


def test_contract_nvml_health_counts_remap_pending_retired_pages_and_lost_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from ringleader.topology.nvml import unhealthy_gpus

    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert unhealthy_gpus(4) == 3 and fake.shutdown
    assert unhealthy_gpus(5) == 4  # and one more GPU the node had that NVML no longer counts
