"""The verdict on a failed run, as every engine reaches it (jobs/failures.py): which restart it
gets, and when the node it blames is cordoned."""

from __future__ import annotations

from collections.abc import Iterator

from ringleader.jobs.failures import Failure, cordon_reason, cordoned_text, restart_number, restarting_text

LOST = Failure(True, "ssh to node-a failed (exit code 255): the node or its network is lost", "node-a")


def test_restarts_are_counted_up_to_the_limit_and_never_past_a_time_limit() -> None:
    assert [restart_number(used, 2) for used in range(4)] == [1, 2, None, None]
    assert restart_number(0, 3, at_time_limit=True) is None
    assert restart_number(0, 0) is None
    assert restarting_text("root cause: w-1 failed (exit code 1); it exited", 1, 2) == (
        "root cause: w-1 failed (exit code 1); it exited; restart 1 of 2 (--max-restarts)")  # fmt: skip


def test_a_node_is_cordoned_on_its_second_blame_with_its_evidence() -> None:
    assert cordon_reason(1, LOST, "job train", cordoned=False) is None
    reason = cordon_reason(2, LOST, "job train", cordoned=False)
    assert reason == f"blamed for 2 failures, the last of job train: {LOST.why}"
    assert cordoned_text("node-a", reason, "drained in Slurm") == (
        f"node node-a cordoned: {reason}; drained in Slurm; `ringleader node uncordon node-a` ends it")  # fmt: skip
    assert cordon_reason(3, LOST, "job train", cordoned=True) is None  # once is enough
    assert cordon_reason(5, Failure(False, "the program exited with code 1"), "job train", cordoned=False) is None


def test_one_job_cordons_one_node_at_most() -> None:
    """A job whose failures blame a second node leaves it in service: a second cordon on one
    job's word takes an administrator (`ringleader node cordon`). Other jobs' cordons and the
    administrator's own do not count against it."""
    first = cordon_reason(2, LOST, "job train", cordoned=False)
    assert first is not None
    second = Failure(True, "ssh to node-b failed (exit code 255): the node or its network is lost", "node-b")
    assert cordon_reason(2, second, "job train", cordoned=False, cordons=[first]) is None
    assert cordon_reason(2, second, "job trainer", cordoned=False, cordons=[first]) is not None
    assert cordon_reason(2, second, "job train", cordoned=False, cordons=["maintenance on node-a"]) is not None
    assert cordon_reason(2, second, "gang ns/train", cordoned=False, cordons=[first]) is not None


def test_the_cordons_are_read_only_where_a_cordon_may_follow() -> None:
    """Kubernetes reads every node to count a gang's cordons: only once a node is to be cordoned."""
    read: list[bool] = []

    def cordons() -> Iterator[str]:
        read.append(True)
        yield from ()

    assert cordon_reason(1, LOST, "gang ns/train", cordoned=False, cordons=cordons()) is None
    assert not read
    assert cordon_reason(2, LOST, "gang ns/train", cordoned=False, cordons=cordons()) is not None
    assert read
