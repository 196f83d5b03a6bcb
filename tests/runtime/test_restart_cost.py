"""A move's restart priced by what restarts cost on this cluster: the embedded engine records how
long each restarted run took from its placement to its program's first line in its log, and the
queue counts the median of the recent ones (30 s until one was measured); a run whose program
wrote nothing is not measured. Real state folder, real supervisors and ranks; the engine's clock
is driven (``ManualClock``), so restarts of a minute and a half take no time, and the agent is
kept from starting: the supervisors run in this process. The rank wrapper stamps lines with the
machine's clock, not the driven one: the restarted program writes its line into its log itself,
stamped at the driven clock's time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringleader.clock import ManualClock
from ringleader.engines.embedded.engine import Runtime
from ringleader.runtime.plan import log_path
from runtime.test_supervisor_phases import Supervised

START = 4_000_000.0


@pytest.fixture
def unattended(home: Path, monkeypatch: pytest.MonkeyPatch, h) -> Iterator[tuple[Runtime, ManualClock]]:  # type: ignore[no-untyped-def]
    """The seeds' 2 x 8 GPUs on a driven clock; submits start no agent."""
    monkeypatch.setattr(Runtime, "_wake", lambda self, needed=None: None)
    clock = ManualClock(START)
    rt = Runtime.open(home, clock=clock)
    try:
        rt.apply_cluster(h.EXAMPLES / "seeds-cluster.yaml")
        yield rt, clock
    finally:
        rt.close()


def supervise(rt: Runtime, job: str, clock: ManualClock) -> None:
    run = Supervised(rt, job, clock)
    run.join(60)
    assert not run.is_alive()


def log_stamp(at: float) -> str:
    """A log line's stamp as the rank wrapper writes it (rank.stamp), for the time ``at``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1e6):06d}Z "


def restarted_after(rt: Runtime, clock: ManualClock, h, tmp_path: Path, waits: tuple[float, ...],  # type: ignore[no-untyped-def]
                    writes: bool = True) -> None:  # fmt: skip
    """A job whose runs fail until it was restarted ``len(waits)`` times, each next run's program
    writing its first line ``waits[i]`` seconds after it was placed again (a busy machine's slow
    start: its imports, its checkpoint); with ``writes`` False, its program writes nothing."""
    if not waits:
        return
    stamp = tmp_path / "stamp"  # the stamp of the restarted program's first line
    log = log_path(rt.home, "flaky", "flaky-worker-0")
    first_line = (f"if os.environ['RINGLEADER_RESTARTS'] != '0':\n"
                  f"    with open({str(log)!r}, 'a') as fh: fh.write(open({str(stamp)!r}).read() + 'resumed\\n')\n")
    program = ("import os, sys\n" + (first_line if writes else "")
               + f"sys.exit(0 if os.environ['RINGLEADER_RESTARTS'] == '{len(waits)}' else 3)")  # fmt: skip
    rt.submit(h.spec("flaky", h.py(program), max_restarts=len(waits)))
    supervise(rt, "flaky", clock)
    for wait in waits:
        assert rt.get("flaky").status.value == "RUNNING"  # requeued and placed again at once
        clock.advance(wait)
        stamp.write_text(log_stamp(clock.now()))
        supervise(rt, "flaky", clock)
    done = rt.get("flaky")
    assert done.status.value == "SUCCEEDED" and done.restarts == len(waits)


def spread_vgg(rt: Runtime, clock: ManualClock, h, tmp_path: Path, run_time_s: float) -> str:  # type: ignore[no-untyped-def]
    """Six GPUs of each node busy, then VGG16 on four GPUs: it starts spread 2 + 2. The holder of
    one node ends (its supervisor's pass after its end weighs the move); returns vgg's Moved
    event, "" when it stayed."""
    release = tmp_path / "release"
    for name in ("short", "long"):
        rt.submit(h.spec(name, h.py(h.waiting_rank(release)), gpus=6, topology_aware=True))
    rt.submit(h.spec("vgg", h.py("pass"), workers=4, topology_aware=True, model="vgg16", run_time_s=run_time_s))
    vgg = rt.get("vgg")
    assert vgg.status.value == "RUNNING" and len(vgg.nodes) == 2
    short = Supervised(rt, "short", clock)
    h.wait_for(lambda: rt.get("short").instances[0].status == "Running", what="the holder's rank to run")
    release.touch()
    short.join(60)
    assert not short.is_alive() and rt.get("short").status.value == "SUCCEEDED"
    return next((e.message for e in rt.get("vgg").events if e.kind == "Moved"), "")


def test_with_no_restart_measured_a_move_counts_30_s(unattended, h, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rt, clock = unattended
    moved = spread_vgg(rt, clock, h, tmp_path, run_time_s=3600.0)
    assert ("counting a restart of ~32 s (2 s grace + 30 s, the default until this cluster has a measured "
            "restart)") in moved  # fmt: skip


def test_after_slow_restarts_a_move_counts_what_they_took(unattended, h, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Restarts of 85 and 95 s: a move counts 90 s beside its grace (~2 min in all), and says so.
    They are the cluster's record: deleting the job that restarted keeps them."""
    rt, clock = unattended
    restarted_after(rt, clock, h, tmp_path, (85.0, 95.0))
    rt.delete(["flaky"])
    moved = spread_vgg(rt, clock, h, tmp_path, run_time_s=3600.0)
    assert ("counting a restart of ~2 min (2 s grace + 90 s, the median of this cluster's last 2 restarts, each "
            "to its program's first output)") in moved  # fmt: skip


def test_restarts_whose_program_wrote_nothing_are_not_measured(unattended, h, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Their ranks ran at once, but when their program ran again is not known: counted as
    restarts of no time they would make every move look cheap, so the default stays."""
    rt, clock = unattended
    restarted_after(rt, clock, h, tmp_path, (85.0, 95.0), writes=False)
    moved = spread_vgg(rt, clock, h, tmp_path, run_time_s=3600.0)
    assert ("counting a restart of ~32 s (2 s grace + 30 s, the default until this cluster has a measured "
            "restart)") in moved  # fmt: skip


@pytest.mark.parametrize(("waits", "moves"), [((), True), ((85.0, 95.0), False)])
def test_a_move_that_paid_with_30_s_does_not_after_slow_restarts(unattended, h, tmp_path: Path, waits,  # type: ignore[no-untyped-def]
                                                                  moves: bool) -> None:  # fmt: skip
    """35 s of work left (~158 s spread, the predictions as they are): moving to one node gains
    ~90 s counting 30 s of restart, more than the minute a move must gain; ~30 s counting the 90 s
    this cluster's restarts took."""
    rt, clock = unattended
    restarted_after(rt, clock, h, tmp_path, waits)
    assert bool(spread_vgg(rt, clock, h, tmp_path, run_time_s=35.0)) is moves
