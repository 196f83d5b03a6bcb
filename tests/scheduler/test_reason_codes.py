"""Why a gang waits, in one word and in words that are true: the cycle's reason codes
(squeue's REASON, Kueue's conditions) and the prose beside them, on every cause a user meets."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, job, node
from ringleader.scheduler import Decision, Holding, ReasonCode, Snapshot, Waiting, run_cycle
from ringleader.scheduler.teams import TeamQueue


def decided(snapshot: Snapshot) -> dict[str, Decision]:
    return {d.job.name: d for d in run_cycle(snapshot).decisions}


def test_a_gang_that_would_fit_on_cordoned_nodes_says_cordoned_not_zero_free() -> None:
    state = cluster(node("a"), node("b"))
    snapshot = Snapshot(state, [Waiting(job(1, name="one"), 0)], now=0.0,
                        cordoned={"a": "by hand: disk check", "b": "2 faults"})  # fmt: skip
    one = decided(snapshot)["one"]
    assert one.reason_code is ReasonCode.CORDONED
    assert one.reasons[0].startswith("it would fit on cordoned node(s) a (by hand: disk check), b (2 faults): it "
                                     "starts once they are uncordoned")
    assert one.node_reasons == {"a": "cordoned (by hand: disk check)", "b": "cordoned (2 faults)"}
    # one node back: it starts there
    assert decided(replace(snapshot, cordoned={"b": "2 faults"}))["one"].ok


def test_a_gang_too_big_even_without_cordons_says_resources() -> None:
    state = cluster(node("a"), node("b", busy=tuple(range(8))))
    snapshot = Snapshot(state, [Waiting(job(2, 8, name="big"), 0)], now=0.0, cordoned={"a": "by hand"})
    big = decided(snapshot)["big"]
    assert big.reason_code is ReasonCode.RESOURCES
    assert big.node_reasons["a"] == "cordoned (by hand)"


def test_reserved_gpus_are_named_for_whom_they_are_held_and_backfill_names_the_fix() -> None:
    state = cluster(node("a", busy=(0, 1, 2, 3)))
    holding = [Waiting(job(1, 8, name="big", priority=10), 0), Waiting(job(1, 4, name="small"), 1)]
    snapshot = Snapshot(state, holding, now=0.0, holding=[Holding("other", expected_end_s=600.0)])
    out = decided(snapshot)
    assert out["big"].reason_code is ReasonCode.RESOURCES and out["big"].reservation is not None
    small = out["small"]
    assert small.reason_code is ReasonCode.RESERVED
    assert "a --time-limit under ~10 min would let it start now on them (backfill)" in small.reasons[-1]
    assert small.node_reasons["a"] == "0 free GPU(s) < 4 per worker (4 reserved for job big)"


def test_a_held_job_is_skipped_by_the_cycle_and_says_held() -> None:
    state = cluster(node("a"))
    snapshot = Snapshot(state, [Waiting(job(1, 8, name="first"), 0, hold=True), Waiting(job(1, 8, name="second"), 1)])
    out = decided(snapshot)
    assert out["second"].ok  # the held one takes nothing, reserves nothing
    first = out["first"]
    assert not first.ok and first.reason_code is ReasonCode.HELD and first.reservation is None
    assert first.reasons == ("held: it is not started until `ringleader release first`",)


def test_a_gang_over_its_queues_maximum_names_the_maximum() -> None:
    state = cluster(node("a"), node("b"))  # 16 GPUs, all free
    team = TeamQueue("team-a", (("*", 4),))
    big = replace(job(1, 8, name="big"), queue="team-a")
    out = decided(Snapshot(state, [Waiting(big, 0)], now=0.0, queues=[team]))["big"]
    assert out.reason_code is ReasonCode.OVER_MAXIMUM
    assert out.reasons[0].startswith("the job asks for 8 GPUs and queue team-a can never hold more than 4 "
                                     "(its quota of 4, in no cohort to borrow from): it never starts there")
    # in a cohort, the maximum is what the cohort's quota adds up to: once it is enough, it borrows
    lender = TeamQueue("team-b", (("*", 3),), cohort="c")
    fits = decided(Snapshot(state, [Waiting(big, 0)], now=0.0, queues=[replace(team, cohort="c"), lender]))
    assert fits["big"].reason_code is ReasonCode.OVER_MAXIMUM
    assert "can never hold more than 7 (its quota of 4 and all cohort c could lend)" in fits["big"].reasons[0]
    lender = TeamQueue("team-b", (("*", 4),), cohort="c")
    fits = decided(Snapshot(state, [Waiting(big, 0)], now=0.0, queues=[replace(team, cohort="c"), lender]))
    assert fits["big"].ok


def test_a_gang_within_maximum_but_over_quota_now_says_quota_exceeded() -> None:
    state = cluster(node("a"), node("b"))
    team = TeamQueue("team-a", (("*", 8),))
    first = replace(job(1, 8, name="first"), queue="team-a")
    second = replace(job(1, 8, name="second"), queue="team-a")
    out = decided(Snapshot(state, [Waiting(first, 0), Waiting(second, 1)], now=0.0, queues=[team]))
    assert out["first"].ok
    assert out["second"].reason_code is ReasonCode.QUOTA_EXCEEDED
