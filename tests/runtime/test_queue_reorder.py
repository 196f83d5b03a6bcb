"""Preemption for queue order on the embedded engine: in a queue ordered las, a new job stops the
preemptible job that attained more GPU service (its Preempted event says it was for order),
never the --non-preemptible one beside it, and nobody within the minimum run time. The engine's
clock is driven (``ManualClock``), so two hours of running take no time; the agent is kept from
starting, so the decisions and the stop asked of the victim are what is checked."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ringleader.clock import ManualClock
from ringleader.engines.embedded.engine import Runtime
from ringleader.scheduler.order import QueueOrder
from ringleader.scheduler.teams import TeamQueue

START = 3_000_000.0


@contextmanager
def las_queue_running_long_and_kept(home: Path, monkeypatch: pytest.MonkeyPatch, h,  # type: ignore[no-untyped-def]
                                    clock: ManualClock) -> Iterator[Runtime]:  # fmt: skip
    """The embedded engine with the seeds' 2 x 8 GPUs, one queue ordered las, and two 8-GPU jobs
    started at START in it: ``long`` (preemptible, the default) and ``kept`` (--non-preemptible)."""
    monkeypatch.setattr(Runtime, "_wake", lambda self, needed=None: None)
    rt = Runtime.open(home, clock=clock)
    try:
        rt.apply_cluster(h.EXAMPLES / "seeds-cluster.yaml")
        rt.create_queue(TeamQueue("train", (("*", 16),), order=QueueOrder.LAS))
        rt.submit(h.spec("long", h.py("pass"), gpus=8, queue="train"))
        rt.submit(h.spec("kept", h.py("pass"), gpus=8, queue="train", preemptible=False))
        yield rt
    finally:
        rt.close()


def test_a_las_queue_stops_the_preemptible_long_job_for_a_new_one(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  h) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    clock = ManualClock(START)
    with las_queue_running_long_and_kept(home, monkeypatch, h, clock) as rt:
        assert {rt.get(n).started_at for n in ("long", "kept")} == {START}
        clock.advance(600.0)  # ten minutes in: within the minimum run, nobody is stopped
        rt.submit(h.spec("early", h.py("pass"), gpus=8, queue="train"))
        assert not [e for n in ("long", "kept") for e in rt.get(n).events if e.kind == "Preempted"]
        assert rt.get("early").status.value == "PENDING"
        rt.delete(["early"])
        clock.advance(2 * 3600.0)  # both have attained 8 x 2 h of GPU service: level 3 of LAS
        rt.submit(h.spec("short", h.py("pass"), gpus=8, queue="train"))
        [said] = [e.message for e in rt.get("long").events if e.kind == "Preempted"]
        assert said.startswith("by job short (priority 0), for order: queue train is ordered las and job short has "
                               "attained 0.0 GPU-h (level 0)")  # fmt: skip
        assert "SIGTERM, then SIGKILL after 2 s; then requeued" in said
        assert not [e for e in rt.get("kept").events if e.kind == "Preempted"]  # --non-preemptible: never
        assert rt.get("short").status.value == "PENDING"  # it starts once long has stopped


def test_the_administrators_minimum_run_lets_order_stop_a_job_sooner(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    h) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    """RINGLEADER_PREEMPT_MIN_RUN_S=300: ten minutes in (level 1 of LAS already), the same new
    job stops the preemptible long one, which the default 30 minutes would still spare."""
    monkeypatch.setenv("RINGLEADER_PREEMPT_MIN_RUN_S", "300")
    clock = ManualClock(START)
    with las_queue_running_long_and_kept(home, monkeypatch, h, clock) as rt:
        clock.advance(600.0)  # 8 GPUs x 10 min = 4,800 GPU-s: past LAS's first level
        rt.submit(h.spec("short", h.py("pass"), gpus=8, queue="train"))
        [said] = [e.message for e in rt.get("long").events if e.kind == "Preempted"]
        assert said.startswith("by job short (priority 0), for order: queue train is ordered las")
        assert not [e for e in rt.get("kept").events if e.kind == "Preempted"]
