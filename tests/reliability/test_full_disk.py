"""A full disk under the state folder (a 512 KiB tmpfs, root only): a job that fills it with
output must not stay RUNNING with its GPUs held; reads keep working; once space is freed the
state is truthful again without anyone repairing it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import JobSpec, Runtime

pytestmark = pytest.mark.slow

NOISY = "import sys\nfor i in range(20000): print('line', i, 'x' * 60)\n"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        # Nothing of the test may outlive it, whatever failed: stop every process started there.
        subprocess.run(["pkill", "-KILL", "-f", str(mount)], check=False)
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_job_filling_the_disk_ends_truthfully_and_frees_its_gpus(small_disk: Path, monkeypatch) -> None:
    home = small_disk / "home"
    monkeypatch.setenv("RINGLEADER_HOME", str(home))
    monkeypatch.setenv("RINGLEADER_GRACE_S", "1")
    rt = Runtime.open(home)
    nodes = small_disk.parent / "c.yaml"
    nodes.write_text("nodes:\n  - name: box\n    preset: pcie-4gpu-workstation\n    emulated: true\n")
    rt.apply_cluster(nodes)
    filler = small_disk / "filler"
    rt.submit(JobSpec("noisy", 2, 1, [sys.executable, "-c", NOISY]))
    # Fill what the job has not: the disk is full while the job writes.
    with contextlib.suppress(OSError):
        filler.write_bytes(b"\0" * (512 << 10))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            rt.list_jobs()  # reads work on a full disk
            rt.get("noisy")
        except Exception as exc:  # pragma: no cover - the failure this test is about
            pytest.fail(f"a read failed on a full disk: {exc!r}")
        time.sleep(0.5)
        if rt.get("noisy").status.is_terminal():
            break
    filler.unlink(missing_ok=True)  # space again: whatever was not recorded must be now
    view = Runtime.open(home).wait("noisy", timeout=60)
    assert view.status.is_terminal()
    assert all(i.status in ("Succeeded", "Failed", "Stopped") for i in view.instances)
    assert rt.nodes().free_gpus == rt.nodes().total_gpus
    rt.delete(["noisy"])
    rt.close()
