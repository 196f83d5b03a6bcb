"""When a gang starts: rule "finish" waits for a better placement exactly when it finishes sooner,
rule "best" waits for a placement as fast as the best one, rule "now" starts on the free GPUs;
and a hypothesis property: "finish" never chooses a start that finishes later than another it
could have taken, and never waits past its longest wait. Rule "finish" counts the queue: a
degraded start holds its GPUs longer than the later, faster placement would, and every job
waiting behind it starts later (``types.QueueCost``); with nobody behind it decides as before."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ringleader.model  # noqa: F401  (installs the throughput model's estimator)
from builders import preset_cluster
from ringleader.reference import reference
from ringleader.scheduler import (
    ClusterState,
    Holding,
    JobRequest,
    Placement,
    QueuedJob,
    QueuePass,
    Snapshot,
    Waiting,
    WorkerSlot,
    run_cycle,
    schedule_queue,
)
from ringleader.scheduler.policies.throughput import current_estimator
from ringleader.scheduler.types import AS_GOOD, StartRule

NOW = 1000.0
# The model's likely ranges (reference.toml [intervals]): a one-node prediction P may over-state
# the measured rate down to P / ONE_NODE_OVER, a several-node one understate it up to
# P / SEVERAL_NODES_UNDER.
ONE_NODE_OVER = 1 + reference()["intervals"]["one_node"][1]
SEVERAL_NODES_UNDER = 1 + reference()["intervals"]["several_nodes"][0]


def vgg(rule: str, work_s: float | None = 3600.0, **extra: object) -> JobRequest:
    """The reference study's job: 4 VGG16 workers of one GPU, with --gputopology."""
    return JobRequest("vgg", 4, 1, topology_aware=True, model="vgg16", start_rule=rule, work_s=work_s,
                      **extra)  # type: ignore[arg-type]  # fmt: skip


def two_busy_nodes() -> ClusterState:
    """2 x DGX-1V, six GPUs busy on each: 4 workers fit only spread, 2 + 2."""
    return preset_cluster(("node-a", "dgx1v", (0, 1, 2, 3, 4, 5)), ("node-b", "dgx1v", (0, 1, 2, 3, 4, 5)))


def one_pass(job: JobRequest, ends: dict[str, float], state: ClusterState | None = None):  # type: ignore[no-untyped-def]
    _, decisions = schedule_queue(state or two_busy_nodes(), [QueuedJob(job, 0, NOW)], now=NOW, expected_ends=ends)
    return decisions[0]


def rates() -> tuple[float, float]:
    """The model's images/s for the job on one node's four GPUs and spread 2 + 2."""
    state = two_busy_nodes()
    spread = schedule_queue(state, [QueuedJob(vgg("now"), 0)])[1][0].placement
    whole = schedule_queue(preset_cluster(("node-a", "dgx1v", ())), [QueuedJob(vgg("now"), 0)])[1][0].placement
    assert spread is not None and whole is not None
    estimate = current_estimator()
    return estimate(state.by_name, whole, vgg("now")), estimate(state.by_name, spread, vgg("now"))


def test_finish_waits_ten_minutes_for_one_node_rather_than_run_spread() -> None:
    ideal, spread = rates()
    assert ideal / spread > 4  # the reference study's 992 vs 200 images/s, as the model predicts it
    decision = one_pass(vgg("finish", risk="averse"), {"busy-node-a": NOW + 600})
    assert decision.placement is None and decision.when is not None and not decision.when.starts_now
    assert decision.reservation is not None and decision.reservation.placement.nodes == ("node-a",)
    assert decision.reservation.start_s == NOW + 600
    wait, now = decision.when.wait, decision.when.now
    assert wait is not None and now is not None
    assert wait.finish_s == pytest.approx(NOW + 600 + 3600)
    assert now.finish_s == pytest.approx(NOW + 3600 * ideal / spread)
    risk = decision.when.at_risk  # the model's ranges: one node at its low end, spread at its high end
    assert risk is not None and risk.wait_images_per_s == pytest.approx(ideal / ONE_NODE_OVER)
    assert risk.now_images_per_s == pytest.approx(spread / SEVERAL_NODES_UNDER)
    assert decision.reasons[0] == (
        f"waits: it finishes sooner (by ~{(now.finish_s - wait.finish_s) / 3600:.1f} h), even at the pessimistic "
        f"end of the likely ranges ({ideal / ONE_NODE_OVER:.0f} images/s later, "
        f"{spread / SEVERAL_NODES_UNDER:.0f} now): "
        f"start now on node-a[2w: GPU 6,7] + node-b[2w: GPU 6,7] at {spread:.0f} images/s, "
        f"finishes in ~{(now.finish_s - NOW) / 3600:.1f} h; "
        f"start in ~10 min on node-a[4w: GPU 0,1,2,3] at {ideal:.0f} images/s, finishes in ~70 min"
    )


def test_a_gang_past_its_expected_end_is_not_taken_to_free_this_instant() -> None:
    """The gang on node-a was predicted to end earlier and still runs: it is expected to overrun
    as long again as it has overrun so far, not to free now at every pass. 30 minutes late, the
    job waits for it with a start in ~30 min (said so); 5 hours late, waiting for it finishes
    later than running spread, and the job starts now."""
    ideal, spread = rates()
    late = one_pass(vgg("finish"), {"busy-node-a": NOW - 1800})
    assert not late.ok and late.reservation is not None and late.reservation.start_s == NOW + 1800
    assert late.reasons[0].endswith(f"start in ~30 min on node-a[4w: GPU 0,1,2,3] at {ideal:.0f} images/s, "
                                    "finishes in ~1.5 h")  # fmt: skip
    assert 3600 * ideal / spread < 5 * 3600 + 3600  # waiting 5 h more loses to running spread
    very_late = one_pass(vgg("finish"), {"busy-node-a": NOW - 5 * 3600})
    assert very_late.ok and very_late.when is not None and very_late.when.starts_now
    assert very_late.placement is not None and len(very_late.placement.nodes) == 2


def test_finish_waits_only_when_waiting_wins_at_the_pessimistic_end() -> None:
    """The node frees late enough that waiting wins on the predictions, but not if one node runs
    at the low end of the model's likely range and spread at the high end (its held-out errors):
    it starts spread now, and says why with both figures."""
    ideal, spread = rates()
    point = 3600 * ideal / spread - 3600  # wait shorter than this: waiting wins on the predictions
    pessimistic = 3600 * ideal / (spread / SEVERAL_NODES_UNDER) - 3600 * ONE_NODE_OVER  # ...and at the pessimistic end
    late = (point + pessimistic) / 2
    decision = one_pass(vgg("finish", risk="averse"), {"busy-node-a": NOW + late})
    when = decision.when
    assert when is not None and when.wait is not None and when.now is not None
    assert _finish(when.wait) < _finish(when.now)  # on the predictions, waiting is sooner
    assert decision.ok and when.starts_now and len(decision.placement.nodes) == 2  # type: ignore[union-attr]
    assert decision.reasons[-1].startswith(
        f"starts now: waiting finishes sooner by ~{(_finish(when.now) - _finish(when.wait)) / 60:.0f} min as "
        "predicted, but not if the later placement runs at the low end of its likely range "
        f"({ideal / ONE_NODE_OVER:.0f} images/s) and this one at the high end "
        f"({spread / SEVERAL_NODES_UNDER:.0f}): start now on node-a[2w"
    )
    earlier = one_pass(vgg("finish", risk="averse"), {"busy-node-a": NOW + pessimistic - 60})
    assert not earlier.ok and earlier.when is not None and not earlier.when.starts_now


def test_a_risk_neutral_job_waits_when_waiting_wins_on_the_predictions() -> None:
    """The user's chosen risk: with ``risk="neutral"``, the default, the same late-freeing node
    that a risk-averse job does not wait for is waited for, since waiting finishes sooner as
    predicted; where waiting loses on the predictions it starts now as well."""
    ideal, spread = rates()
    point = 3600 * ideal / spread - 3600
    pessimistic = 3600 * ideal / (spread / SEVERAL_NODES_UNDER) - 3600 * ONE_NODE_OVER
    late = (point + pessimistic) / 2
    averse = one_pass(vgg("finish", risk="averse"), {"busy-node-a": NOW + late})
    neutral = one_pass(vgg("finish"), {"busy-node-a": NOW + late})
    assert vgg("finish").risk == "neutral"
    assert averse.ok and not neutral.ok
    when = neutral.when
    assert when is not None and when.at_risk is None and not when.starts_now
    assert neutral.reservation is not None and neutral.reservation.placement.nodes == ("node-a",)
    assert neutral.reasons[0].startswith(
        f"waits: it finishes sooner (by ~{(_finish(when.now) - _finish(when.wait)) / 60:.0f} min), "
        "taking the predictions as they are (risk neutral): start now on node-a[2w")
    too_late = one_pass(vgg("finish", risk="neutral"), {"busy-node-a": NOW + point + 60})
    assert too_late.ok and too_late.when is not None and too_late.when.starts_now


def test_a_risk_is_one_of_the_known_ones() -> None:
    with pytest.raises(ValueError, match="risk 'bold' is not one of averse, neutral"):
        vgg("finish", risk="bold")


def _finish(option: object) -> float:
    return float(option.finish_s)  # type: ignore[attr-defined]


def test_finish_starts_spread_when_the_node_frees_too_late() -> None:
    ideal, spread = rates()
    late = 3600 * ideal / spread  # waiting this long and then running the hour ends later
    decision = one_pass(vgg("finish"), {"busy-node-a": NOW + late})
    assert decision.ok and decision.placement is not None and len(decision.placement.nodes) == 2
    assert decision.when is not None and decision.when.starts_now
    assert decision.reasons[-1].startswith("starts now: it finishes sooner (by ~60 min): start now on node-a[2w")
    # both finishes are shown: the later start it gave up finishes later
    wait = decision.when.wait
    assert wait is not None and wait.start_s == pytest.approx(NOW + late) and _finish(wait) > _finish(decision.when.now)
    assert f"; start in ~{late / 3600:.1f} h on node-a[4w: GPU 0,1,2,3]" in decision.reasons[-1]


def test_finish_weighs_the_time_limit_when_no_work_is_given() -> None:
    # 10 min to wait, a 1 h limit taken as the work (Slurm's backfill does the same)
    decision = one_pass(vgg("finish", work_s=None, time_limit_s=3600.0), {"busy-node-a": NOW + 600})
    assert not decision.ok and decision.when is not None and decision.when.wait is not None
    # without either there is nothing to weigh: it starts as rule "now" would
    decision = one_pass(vgg("finish", work_s=None), {"busy-node-a": NOW + 600})
    assert decision.ok and decision.when is None


def test_the_longest_wait_bounds_the_wait_from_submit() -> None:
    ends = {"busy-node-a": NOW + 600}
    assert one_pass(vgg("finish", max_wait_s=900.0), ends).when.wait is not None  # type: ignore[union-attr]
    short = one_pass(vgg("finish", max_wait_s=300.0), ends)
    assert short.ok and len(short.placement.nodes) == 2  # type: ignore[union-attr]
    # submitted 800 s ago with a 900 s longest wait: 100 s left, the node frees in 600 s
    _, decisions = schedule_queue(two_busy_nodes(), [QueuedJob(vgg("finish", max_wait_s=900.0), 0, NOW - 800)],
                                  now=NOW, expected_ends=ends)  # fmt: skip
    assert decisions[0].ok


def test_best_waits_even_when_waiting_finishes_later_and_now_starts_spread() -> None:
    far = {"busy-node-a": NOW + 10 * 3600}
    best = one_pass(vgg("best", work_s=None), far)
    assert not best.ok and best.reservation is not None and best.reservation.placement.nodes == ("node-a",)
    assert best.reasons[0].startswith("waits for a placement as fast as its best: start now on")
    now = one_pass(vgg("now"), far)
    assert now.ok and len(now.placement.nodes) == 2 and now.when is None  # type: ignore[union-attr]
    # "best" with no known end to wait for: it pends, and holds nothing it cannot count on
    unknown = one_pass(vgg("best", work_s=None), {})
    assert not unknown.ok and unknown.reservation is None and unknown.when is not None


def test_a_free_best_placement_starts_at_once_with_nothing_weighed() -> None:
    state = preset_cluster(("node-a", "dgx1v", (0, 1, 2, 3)), ("node-b", "dgx1v", (0, 1, 2, 3, 4, 5)))
    decision = one_pass(vgg("finish"), {"busy-node-b": NOW + 60}, state)
    assert decision.ok and decision.placement.nodes == ("node-a",) and decision.when is None  # type: ignore[union-attr]


def test_a_waiting_gang_holds_its_gpus_against_the_jobs_behind_it() -> None:
    # node-a frees in 10 min; its free GPU 0 is one of the 4 (0-3) the waiting gang will take
    state = preset_cluster(("node-a", "dgx1v", (1, 2, 3, 4, 5)), ("node-b", "dgx1v", (0, 1, 2, 3, 4, 5)))
    filler = JobRequest("filler", 3, 1, topology_aware=True, model="vgg16", time_limit_s=7200.0)
    _, decisions = schedule_queue(state, [QueuedJob(vgg("finish"), 0, NOW), QueuedJob(filler, 1, NOW)], now=NOW,
                                  expected_ends={"busy-node-a": NOW + 600})  # fmt: skip
    first, second = decisions
    assert not first.ok and first.reservation is not None
    held = {("node-a", g) for g in first.reservation.placement.gpus_on("node-a")}
    assert ("node-a", 0) in held
    # the 2-hour filler would have taken node-a's three free GPUs; GPU 0 is held, so it spreads
    assert second.ok and second.placement is not None
    taken = {(s.node, g) for s in second.placement.slots for g in s.gpus}
    assert not taken & held and ("node-a", 0) not in taken
    # without the waiting gang it takes node-a's 0, 6 and 7
    _, alone = schedule_queue(state, [QueuedJob(filler, 1, NOW)], now=NOW, expected_ends={"busy-node-a": NOW + 600})
    assert alone[0].placement is not None and alone[0].placement.gpus_on("node-a") == (0, 6, 7)


# -- the property ------------------------------------------------------------------------------


@st.composite
def busy_clusters(draw: st.DrawFn) -> tuple[ClusterState, dict[str, float]]:
    """1-4 DGX-1V nodes, each with up to two running gangs of its own, each ending at its own
    time (or at no known time)."""
    count = draw(st.integers(1, 4))
    state = preset_cluster(*((f"node-{i}", "dgx1v", ()) for i in range(count)))
    ends: dict[str, float] = {}
    for i in range(count):
        busy = sorted(draw(st.sets(st.integers(0, 7), max_size=8)))
        cut = draw(st.integers(0, len(busy)))
        for part, gpus in enumerate((busy[:cut], busy[cut:])):
            if not gpus:
                continue
            name = f"busy-node-{i}-{part}"
            state = state.with_placement(Placement(name, (WorkerSlot(0, f"node-{i}", tuple(gpus)),)))
            end = draw(st.one_of(st.none(), st.floats(0.0, 20_000.0)))
            if end is not None:
                ends[name] = NOW + end
    return state, ends


@settings(max_examples=300, deadline=None)
@given(
    busy_clusters(),
    st.sampled_from([(2, 1), (4, 1), (8, 1), (2, 4), (3, 2)]),
    st.floats(60.0, 20_000.0),
    st.one_of(st.none(), st.just(0.0), st.floats(1.0, 20_000.0)),
    st.sampled_from(["vgg16", "resnet50", "alexnet"]),
    st.integers(0, 4),
)
def test_finish_takes_the_start_that_finishes_the_queue_first_and_never_waits_past_its_limit(
    cluster_ends: tuple[ClusterState, dict[str, float]], shape: tuple[int, int], work: float,
    max_wait: float | None, model: str, behind: int,
) -> None:  # fmt: skip
    """Of every start it could take (now, or at an expected end within its wait after which it
    fits on fewer nodes than before: the first 16), rule "finish" takes the one of least finish
    plus the delay its run puts on the ``behind`` jobs queued after it (its own finish alone with
    nobody behind)."""
    state, ends = cluster_ends
    job = JobRequest("j", shape[0], shape[1], topology_aware=True, model=model, start_rule="finish",
                     work_s=work, max_wait_s=max_wait)  # fmt: skip
    queue = QueuePass(state, NOW, ends, behind={"j": behind} if behind else {})
    decision, after = queue.decide(job)
    ideal = queue.ideal_rate(job)
    if ideal is None:  # never fits: nothing is weighed, nothing started
        assert decision.when is None and not decision.ok
        return
    estimate = current_estimator()
    price = behind * job.total_gpus / state.total_gpus  # each second it runs delays those behind this much

    def score(start: float, rate: float) -> float:
        run = work * ideal / rate
        return start + run + price * run

    # every start it could take: now on the free GPUs, or at an expected end within its wait
    scores = []
    if decision.ok:
        assert decision.placement is not None
        scores.append(score(NOW, estimate(state.by_name, decision.placement, job)))
        assert after.state == state.with_placement(decision.placement)  # a whole gang, committed
    limit = math.inf if max_wait is None else NOW + max_wait
    later = [score(s, estimate(state.by_name, p, job))
             for s, p in queue.future_options(job, fewer_nodes=True) if s is not None and s <= limit]  # fmt: skip
    when = decision.when
    if when is None:
        # nothing weighed: it started on a placement as good as the best (or its longest wait,
        # zero, is over), or waits as any gang that fits no free GPUs with no later start in reach
        if decision.ok and max_wait != 0:
            assert scores[0] <= NOW + (1 + price) * work / (1 - AS_GOOD) + 1e-6
        return
    assert when.rule is StartRule.FINISH and when.at_risk is None  # the default risk: the predictions
    chosen = when.now if when.starts_now else when.wait
    assert chosen is not None and chosen.finish_s is not None
    for other in [*scores, *later[:16]]:
        assert score(chosen.start_s, chosen.images_per_s) <= other + 1e-6
    if not when.starts_now:
        assert chosen.start_s <= limit and chosen.start_s > NOW - 1e-9
        assert decision.reservation is not None and decision.reservation.start_s == chosen.start_s
        assert after.state == state  # nothing committed while it waits


# -- rule "finish" counts the queue (types.QueueCost) -----------------------------------------


def small(name: str) -> JobRequest:
    return JobRequest(name, 1, 1, model="resnet50", work_s=600.0)


def decide_first(job: JobRequest, behind: int, node_a_frees_s: float):  # type: ignore[no-untyped-def]
    queue = [QueuedJob(job, 0, NOW)] + [QueuedJob(small(f"s{i}"), i + 1, NOW) for i in range(behind)]
    _, decisions = schedule_queue(two_busy_nodes(), queue, now=NOW, expected_ends={"busy-node-a": NOW + node_a_frees_s})
    return decisions[0]


def test_a_degraded_start_that_delays_the_queue_waits_where_its_own_finish_would_start_it() -> None:
    """Spread 2 + 2 the hour's work takes ~5 h; node-a frees 10 min after the point where waiting
    stops paying for the job itself. Alone it starts spread (10 min sooner); with one job
    behind it, its 4 GPUs held ~4 h longer cost that job ~1 h on 16 GPUs: it waits for node-a."""
    ideal, spread = rates()
    run_spread = 3600 * ideal / spread
    frees = run_spread - 3600 + 600  # starting now finishes it 10 min sooner
    alone = decide_first(vgg("finish", risk="neutral"), 0, frees)
    assert alone.ok and alone.when is not None and alone.when.starts_now
    assert alone.when.queue is not None and alone.when.queue.waiting == 0
    queued = decide_first(vgg("finish", risk="neutral"), 1, frees)
    assert not queued.ok and queued.reservation is not None and queued.reservation.placement.nodes == ("node-a",)
    cost = queued.when.queue  # type: ignore[union-attr]
    assert cost is not None and (cost.waiting, cost.gpus, cost.cluster_gpus) == (1, 4, 16)
    assert abs(cost.extra_hold_s - (run_spread - 3600)) < 1e-6 and abs(cost.gain_now_s - 600) < 1e-6
    extra_h = (run_spread - 3600) / 3600
    assert queued.reasons[0].startswith(
        f"waits: the queue finishes sooner by ~{(4 * (run_spread - 3600) / 16 - 600) / 60:.0f} min: starting now "
        f"holds 4 GPUs ~{extra_h:.1f} h longer from 1 waiting job(s) (~{4 * extra_h / 16 * 60:.0f} min later each, "
        "on 16 GPUs), more than the ~10 min it gains: start now on node-a[2w"
    )


def test_a_start_that_gains_more_than_the_queue_loses_still_starts_now() -> None:
    ideal, spread = rates()
    run_spread = 3600 * ideal / spread
    frees = run_spread - 3600 + 3 * 3600  # starting now finishes it 3 h sooner: more than ~1 h per job behind
    decision = decide_first(vgg("finish", risk="neutral"), 2, frees)
    assert decision.ok and decision.when is not None and decision.when.starts_now
    delay = 2 * 4 * (run_spread - 3600) / 16  # 2 jobs behind, 4 GPUs held ~4 h longer of 16
    assert decision.reasons[-1].startswith(
        f"starts now: it finishes sooner (by ~3.0 h), more than the ~{delay / 3600:.1f} h it delays 2 waiting job(s): "
        "start now on node-a[2w")


def test_finish_looks_past_its_own_finish_for_the_start_the_queue_gains_from() -> None:
    """A GPU of node-b frees in 10 min (still a spread start), node-a in ~4 h (one node). For the
    gang alone starting spread now finishes first (~4.5 h, against ~5 h on node-a), so its walk
    of later starts used to stop before node-a's and weigh only the 10-minute one: as slow as
    now, so it started spread. With 2 jobs behind it, its 4 GPUs held ~3.5 h longer delay each
    of them ~53 min: waiting for node-a finishes the queue sooner, and it waits."""
    ideal, spread = rates()
    run_spread = 3600 * ideal / spread
    node_a = run_spread - 3600 + 1800  # one node finishes it 30 min later than spread now
    state = preset_cluster(("node-a", "dgx1v", (0, 1, 2, 3, 4, 5)), ("node-b", "dgx1v", (0, 1, 2, 3, 4)))
    state = state.with_placement(Placement("short", (WorkerSlot(0, "node-b", (5,)),)))
    ends = {"busy-node-a": NOW + node_a, "short": NOW + 600}
    queue = [QueuedJob(vgg("finish", risk="neutral"), 0, NOW)]
    queue += [QueuedJob(small(f"s{i}"), i + 1, NOW) for i in range(2)]
    _, decisions = schedule_queue(state, queue, now=NOW, expected_ends=ends)
    waits = decisions[0]
    assert not waits.ok and waits.reservation is not None and waits.reservation.placement.nodes == ("node-a",)
    assert waits.when is not None and waits.when.wait is not None and waits.when.wait.start_s == NOW + node_a
    assert waits.reasons[0].startswith("waits: the queue finishes sooner by ~75 min: starting now holds 4 GPUs "
                                       "~3.5 h longer from 2 waiting job(s)")  # fmt: skip
    alone = schedule_queue(state, queue[:1], now=NOW, expected_ends=ends)[1][0]
    assert alone.ok and alone.placement is not None and len(alone.placement.nodes) == 2


def test_finish_waits_for_one_node_past_many_single_gpus_that_free_first() -> None:
    """18 single GPUs free on six other nodes in the next 18 minutes, none leaving 4 on one node;
    node-a frees in an hour. Each of those ends was a later start as spread as now, and the walk
    of 16 later starts ended before node-a's: the gang started spread (~4.5 h) instead of waiting
    an hour for one node (~2 h)."""
    state = preset_cluster(("node-a", "dgx1v", (0, 1, 2, 3, 4, 5)), ("node-b", "dgx1v", (0, 1, 2, 3, 4, 5)),
                           *((f"node-c{i}", "dgx1v", (0, 1, 2, 3, 4)) for i in range(6)))  # fmt: skip
    ends = {"busy-node-a": NOW + 3600}
    for i in range(6):
        for gpu in (5, 6, 7):
            name = f"tiny-{i}-{gpu}"
            state = state.with_placement(Placement(name, (WorkerSlot(0, f"node-c{i}", (gpu,)),)))
            ends[name] = NOW + 60 * (3 * i + gpu - 4)
    decision = one_pass(vgg("finish", risk="neutral"), ends, state)
    assert not decision.ok and decision.reservation is not None
    assert decision.reservation.placement.nodes == ("node-a",) and decision.reservation.start_s == NOW + 3600


def test_the_walk_skips_ends_only_while_the_gang_could_fit_on_fewer_nodes() -> None:
    """Once a later start puts the gang on as few nodes as it needs, every later end is weighed
    again (better GPUs inside the node, nodes under one switch): a gang of one 2-GPU worker on a
    node whose eight one-GPU jobs end a minute apart has a later start at each of the last seven
    ends, with the walk's filter as without it (it first skipped all but the first)."""
    state = preset_cluster(("node-a", "dgx1v", ()))
    ends = {}
    for gpu in range(8):
        state = state.with_placement(Placement(f"tiny-{gpu}", (WorkerSlot(0, "node-a", (gpu,)),)))
        ends[f"tiny-{gpu}"] = NOW + 60 * (gpu + 1)
    queue = QueuePass(state, NOW, ends)
    job = JobRequest("pair", 1, 2, topology_aware=True, model="vgg16", start_rule="finish", work_s=3600.0)
    walked = list(queue.future_options(job, fewer_nodes=True))
    assert [start for start, _ in walked] == [*(NOW + 60 * k for k in range(2, 9)), None]  # None: all running end
    assert walked == list(queue.future_options(job))


@settings(max_examples=30, deadline=None)
@given(st.floats(0.0, 6 * 3600.0), st.integers(0, 3), st.sampled_from(["averse", "neutral"]))
def test_finish_starts_now_exactly_when_its_gain_covers_the_queue_delay(frees: float, behind: int, risk: str) -> None:
    """Whatever the wait and the queue: the gang starts now iff its own gain (at the end of the
    ranges that favours now, for a risk-averse job) is at least the delay to the jobs behind;
    with nobody behind that is the rule that weighed its own finish only."""
    decision = decide_first(vgg("finish", risk=risk), behind, 60.0 + frees)
    when = decision.when
    assert when is not None and when.now is not None
    if when.wait is None:  # no later start finishes sooner: nothing to weigh
        assert decision.ok
        return
    assert when.now.finish_s is not None and when.wait.finish_s is not None
    own = when.wait.finish_s - when.now.finish_s
    if when.at_risk is not None:
        own = max(own, when.at_risk.wait_finish_s - when.at_risk.now_finish_s)
    extra = (when.now.finish_s - when.now.start_s) - (when.wait.finish_s - when.wait.start_s)
    delay = behind * 4 * extra / 16
    assert decision.ok == when.starts_now == (own >= delay)
    if behind == 0:
        assert when.starts_now == (own >= 0)


def test_a_kept_answer_is_decided_again_when_a_gang_runs_late() -> None:
    """A host that keeps answers across cycles (same epoch, same minute) keeps none once a
    holding gang's expected end moved: the reason reads the new start, not the old one."""
    job = vgg("finish")

    def cycle(end_s: float, decided_on: dict[str, object]):  # type: ignore[no-untyped-def]
        snapshot = Snapshot(two_busy_nodes(), [Waiting(job, 0, NOW)], now=NOW + 5,
                            holding=[Holding("busy-node-a", expected_end_s=end_s)],
                            decided_on=decided_on, epoch=1)  # type: ignore[arg-type]  # fmt: skip
        return run_cycle(snapshot)

    first = cycle(NOW + 600, {})
    assert "start in ~10 min on node-a[4w: GPU 0,1,2,3]" in first.decisions[0].reasons[0]
    kept = cycle(NOW + 600, first.decided_on)
    assert kept.unchanged == 1 and not kept.decisions
    late = cycle(NOW + 1200, first.decided_on)
    assert late.unchanged == 0 and "start in ~20 min on node-a[4w" in late.decisions[0].reasons[0]
