"""Reservations, backfill and age in the queue: the starvation cases of the issue, a bounded wait
under age, and invariants over random queues run pass after pass (hypothesis)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import cluster, job, node
from ringleader.scheduler import (
    NO_RESERVATIONS,
    BackfillConfig,
    ClusterState,
    Decision,
    JobRequest,
    Placement,
    QueuedJob,
    ReasonCode,
    WorkerSlot,
    schedule_queue,
)
from ringleader.topology import NodeSpec, preset


def gpus_of(placement: Placement) -> set[tuple[str, int]]:
    return {(s.node, g) for s in placement.slots for g in s.gpus}


def by_name(decisions: list[Decision]) -> dict[str, Decision]:
    return {d.job.name: d for d in decisions}


# -- the cases, one pass, no times given (the runtime's call today) ---------------------


def test_big_gang_on_a_half_busy_node_keeps_small_jobs_off_its_gpus() -> None:
    # One 8-GPU node, 4 GPUs held by a job with no known end: the 8-GPU job at priority 100
    # reserves the whole node; the 2-GPU jobs behind it no longer take the free half.
    state = cluster(node("node-a", busy=(0, 1, 2, 3)))
    pending = [QueuedJob(job(1, 8, name="big", priority=100), 0)]
    pending += [QueuedJob(job(1, 2, name=f"small-{i}"), i + 1) for i in range(3)]
    after, decisions = schedule_queue(state, pending)
    assert after == state  # nothing started
    big = by_name(decisions)["big"]
    assert big.reservation is not None and big.reservation.start_s is None
    assert gpus_of(big.reservation.placement) == {("node-a", g) for g in range(8)}
    assert big.reasons[0] == (
        "reserved GPUs 0-7 on node-a, expected start unknown (a job holding them has no time limit)"
    )
    small = by_name(decisions)["small-0"]
    assert small.reasons[-1].startswith("waits for reservation of job big")
    # The queue before reservations let them in: the starvation this replaces.
    _, old = schedule_queue(state, pending, config=NO_RESERVATIONS)
    assert [d.job.name for d in old if d.ok] == ["small-0", "small-1"]


def test_two_node_gang_at_priority_1000_is_not_passed_by_8_gpu_jobs() -> None:
    # Four nodes, each with 4 GPUs busy; the 2x8 gang reserves two whole nodes and the six
    # priority-0 8-GPU jobs take no GPU of them when those nodes free.
    state = cluster(*(node(f"n{i}", busy=(0, 1, 2, 3)) for i in range(4)))
    pending = [QueuedJob(job(2, 8, name="big", priority=1000), 0)]
    pending += [QueuedJob(job(1, 8, name=f"eight-{i}"), i + 1) for i in range(6)]
    _, decisions = schedule_queue(state, pending)
    big = by_name(decisions)["big"]
    assert big.reservation is not None and len(big.reservation.placement.nodes) == 2
    # n-1 more gangs may reserve (depth 2): the first 8-GPU job takes other nodes, not big's.
    second = by_name(decisions)["eight-0"].reservation
    assert second is not None and not set(second.placement.nodes) & set(big.reservation.placement.nodes)
    assert all(d.reservation is None for d in decisions[2:])


# -- over time: a tiny event loop around the pure scheduler -------------------------------------


@dataclass(frozen=True)
class Submit:
    at: float
    request: JobRequest
    runs_s: float  # how long it really runs once started (<= its time limit)


def run_queue(
    state: ClusterState, submits: list[Submit], config: BackfillConfig, ends: dict[str, float], until: float
) -> tuple[dict[str, float], list[tuple[float, list[Decision]]]]:
    """Pass after pass at every arrival and end: start times, and every pass's decisions.

    ``ends`` are the initial running jobs' expected (and real) ends."""
    real_end = dict(ends)
    expected = dict(ends)
    started: dict[str, float] = {}
    waiting: list[QueuedJob] = []
    passes = []
    by_job = {s.request.name: s for s in submits}
    times = sorted({s.at for s in submits} | set(ends.values()))
    while times and times[0] <= until:
        now = times.pop(0)
        for name in [n for n, t in real_end.items() if t <= now]:
            state = state.without_job(name)
            del real_end[name]
            expected.pop(name, None)
        waiting += [QueuedJob(s.request, i, s.at) for i, s in enumerate(submits) if s.at == now]
        state, decisions = schedule_queue(state, waiting, now=now, expected_ends=expected, config=config)
        passes.append((now, decisions))
        for d in decisions:
            if d.ok:
                started[d.job.name] = now
                real_end[d.job.name] = now + by_job[d.job.name].runs_s
                if d.job.time_limit_s is not None:
                    expected[d.job.name] = now + d.job.time_limit_s
                times = sorted({*times, real_end[d.job.name]})
        waiting = [q for q in waiting if q.job.name not in started]
    return started, passes


def limited(request: JobRequest, limit: float) -> JobRequest:
    return replace(request, time_limit_s=limit)


def test_big_gang_starts_at_its_reservation_and_short_jobs_backfill_before_it() -> None:
    # node-a frees at 840 s; the 8-GPU job reserves it from then. A 2-GPU job that ends by 840
    # backfills onto the reserved node; one with a longer limit must wait; node-b is not
    # reserved, so a job without a limit still starts there.
    state = ClusterState.empty([NodeSpec("node-a", preset("dgx1v")), NodeSpec("node-b", preset("dgx1v"))])
    state = state.with_placement(Placement("running", (WorkerSlot(0, "node-a", (0, 1, 2, 3)),)))
    state = state.with_placement(Placement("other", (WorkerSlot(0, "node-b", tuple(range(8))),)))
    submits = [
        Submit(0, limited(job(1, 8, name="big", priority=100), 3600), 3600),
        Submit(10, limited(job(1, 2, name="short"), 600), 600),
        Submit(20, limited(job(1, 2, name="long"), 1200), 1200),
        Submit(30, job(1, 2, name="unlimited"), 100),
    ]
    started, passes = run_queue(state, submits, BackfillConfig(), {"running": 840, "other": 900}, until=10_000)
    first = by_name(passes[0][1])["big"].reservation
    assert first is not None and first.start_s == 840 and first.starts_in_s == 840
    assert started["big"] == 840  # no later than reserved
    assert started["short"] == 10  # ends at 610, before the reservation
    assert started["long"] == 900 and started["unlimited"] == 900  # node-b when "other" ends
    reasons = by_name(passes[2][1])["long"].reasons
    assert reasons[-1] == ("waits for reservation of job big: its time limit ends after the reservation starts "
                           "(in ~14 min); a --time-limit under ~14 min would let it start now on them (backfill)")
    assert by_name(passes[2][1])["long"].reason_code is ReasonCode.RESERVED
    # Without reservations the small jobs take node-a's free half and the big gang waits longer.
    old, _ = run_queue(state, submits, NO_RESERVATIONS, {"running": 840, "other": 900}, until=10_000)
    assert old["big"] > 840


def stream_of_small_jobs(until: float) -> list[Submit]:
    """Two 4-GPU priority-10 jobs every 100 s (plus one at 0): one always waits behind them."""
    submits = [Submit(0, limited(job(1, 4, name="s-0-x", priority=10), 100), 100)]
    for k in range(int(until // 100)):
        for half in "ab":
            submits.append(Submit(k * 100, limited(job(1, 4, name=f"s-{k}-{half}", priority=10), 100), 100))
    return submits


def test_age_bounds_the_wait_of_a_gang_behind_a_stream_of_higher_priority_jobs() -> None:
    state = cluster(node("node-a"))
    big = Submit(0, limited(job(1, 8, name="big", priority=0), 300), 300)
    submits = [big, *stream_of_small_jobs(until=3000)]
    # Without age the priority-10 stream keeps the one reservation (depth 1): big never starts.
    no_age = BackfillConfig(reservation_depth=1, age_weight=0)
    started, _ = run_queue(state, submits, no_age, {}, until=3000)
    assert "big" not in started
    # Weight 20 over 1000 s: big ranks before a small job that waited w once 20 t / 1000 >= 10 +
    # 20 w / 1000 (ties go to the older job); small jobs wait at most 100 s here, so from t = 600
    # s, then it waits at most for the running jobs' time limit (100 s): the bound is 700 s.
    aged = BackfillConfig(reservation_depth=1, age_weight=20, max_age_s=1000)
    started, _ = run_queue(state, submits, aged, {}, until=3000)
    assert 500 < started["big"] <= 700


# -- invariants over random queues -------------------------------------------------------------


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ClusterState, list[Submit], BackfillConfig]:
    n_nodes = draw(st.integers(1, 3))
    state = ClusterState.empty([NodeSpec(f"n{i}", preset("dgx1v")) for i in range(n_nodes)])
    submits = []
    for i in range(draw(st.integers(1, 8))):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        workers = draw(st.integers(1, max(1, n_nodes * 8 // gpus // 2)))
        limit = draw(st.integers(10, 300))
        runs = limit * draw(st.sampled_from([0.3, 0.7, 1.0]))
        submits.append(Submit(draw(st.integers(0, 200)), limited(job(workers, gpus, name=f"j{i}"), limit), runs))
    config = BackfillConfig(reservation_depth=draw(st.integers(1, 3)), age_weight=draw(st.sampled_from([0, 5])))
    return state, sorted(submits, key=lambda s: s.at), config


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_no_shared_gpu_no_delayed_reservation_and_the_head_starts_on_time(
    scenario: tuple[ClusterState, list[Submit], BackfillConfig],
) -> None:
    state, submits, config = scenario
    started, passes = run_queue(state, submits, config, {}, until=10**6)
    assert set(started) == {s.request.name for s in submits}  # every gang starts: no starvation
    promised: dict[str, float] = {}
    for now, decisions in passes:
        taken: set[tuple[str, int]] = set()
        reservations = []
        for d in decisions:  # in queue order
            if d.placement is not None:
                gpus = gpus_of(d.placement)
                assert not gpus & taken, "two gangs on one GPU"
                taken |= gpus
                for r in reservations:  # reserved by a job ahead of this one
                    if gpus & gpus_of(r.placement):
                        limit = d.job.time_limit_s
                        assert limit is not None and r.start_s is not None and now + limit <= r.start_s
            elif d.reservation is not None:
                if not reservations and d.reservation.start_s is not None:
                    # The first gang in order that cannot start: nothing may delay it.
                    promised.setdefault(d.job.name, d.reservation.start_s)
                reservations.append(d.reservation)
    for name, start in promised.items():
        assert started[name] <= start
