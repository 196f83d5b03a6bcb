"""Log files: `logs --tail N` reads the log from its end (the memory it needs is that of the
lines shown, not of the log), and shows exactly the last N lines the whole-file reading showed;
a restarted run's first line of its program's own is found for its restart's measure."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringleader.jobs import logfiles
from ringleader.jobs.logfiles import read_log

REPO = Path(__file__).resolve().parents[2]
STAMP = "2024-05-01T10:00:00.000000Z "


def whole_file_tail(data: bytes, tail: int | None) -> str:
    """What `logs --tail` showed by reading the whole file: its last ``tail`` newline-ended lines."""
    lines = data.decode(errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the last line's newline ends it; it does not start another
    ended = [line + "\n" for line in lines]
    if ended and not data.endswith(b"\n"):
        ended[-1] = ended[-1][:-1]
    picked = ended if tail is None else ended[-tail:] if tail > 0 else []
    return "".join(picked)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.text(alphabet="ab\r\t é", max_size=12), max_size=30), final_newline=st.booleans(),
       tail=st.none() | st.integers(0, 40), block=st.integers(1, 9))  # fmt: skip
def test_the_last_lines_read_from_the_end_are_the_whole_file_s(tmp_path_factory, lines: list[str],
                                                               final_newline: bool, tail: int | None,
                                                               block: int) -> None:  # fmt: skip
    data = "\n".join(lines).encode() + (b"\n" if final_newline and lines else b"")
    path = tmp_path_factory.mktemp("log") / "w.log"
    path.write_bytes(data)
    old_block = logfiles.TAIL_BLOCK
    logfiles.TAIL_BLOCK = block  # tiny blocks: lines and newlines across every block boundary
    try:
        assert read_log(path, tail, timestamps=True) == whole_file_tail(data, tail)
    finally:
        logfiles.TAIL_BLOCK = old_block


def test_a_missing_log_is_empty(tmp_path: Path) -> None:
    assert read_log(tmp_path / "none.log", 5) == ""


MEMORY_CAP = 1 << 30  # the command itself fits well within 1 GiB; the log is 2 GiB


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


@pytest.mark.slow
def test_logs_tail_of_a_log_bigger_than_the_memory_cap(tmp_path: Path) -> None:
    from ringleader.engines.embedded.engine import JobSpec, Runtime

    home = tmp_path / "home"
    cluster = tmp_path / "c.yaml"
    cluster.write_text("nodes:\n  - name: box\n    preset: pcie-4gpu-workstation\n    emulated: true\n")
    with Runtime.open(home) as rt:
        rt.apply_cluster(cluster)
        rt.submit(JobSpec("big", 1, 1, ["true"]))
        rt.wait("big", timeout=60)
        log = rt.log_file("big")
    # 2 GiB of output (a hole: no disk used), then its last lines.
    with log.open("wb") as out:
        out.truncate(2 << 30)
        out.seek(2 << 30)
        out.write(b"".join(f"{STAMP}step {i}\n".encode() for i in range(10)))
    env = {**os.environ, "RINGLEADER_HOME": str(home)}
    env.pop("RINGLEADER_DEBUG", None)
    for extra in ([], ["--follow"]):
        done = subprocess.run([sys.executable, "-m", "ringleader.cli.main", "logs", "big", "--tail", "3", *extra],
                              env=env, capture_output=True, text=True, timeout=120, preexec_fn=_cap_memory,
                              cwd=REPO)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout == "step 7\nstep 8\nstep 9\n", done.stdout[-300:]


def test_a_program_s_first_line_is_its_own_since_its_run_s_start(tmp_path: Path) -> None:
    """A restarted run's first line: not an earlier run's (stamped before it), not the rank
    wrapper's own, not a line still being written; read on from where the last look ended."""
    log = tmp_path / "job-worker-0.log"
    log.write_bytes(b"2024-05-01T09:59:00.000000Z epoch 3 of the run before\n"
                    b"2024-05-01T10:00:01.000000Z ringleader: 2 line(s) dropped: the log could not be written\n"
                    b"2024-05-01T10:00:02.500000Z resum")  # fmt: skip
    since = logfiles.stamp_seconds(STAMP)
    assert since is not None
    at, offset = logfiles.first_program_line(log, 0, since)
    assert at is None and log.read_bytes()[offset:] == b"2024-05-01T10:00:02.500000Z resum"
    with log.open("ab") as fh:
        fh.write(b"ed at step 10\n2024-05-01T10:00:03.000000Z step 11\n")
    assert logfiles.first_program_line(log, offset, since)[0] == since + 2.5
    assert logfiles.first_program_line(tmp_path / "none.log", 0, since) == (None, 0)
