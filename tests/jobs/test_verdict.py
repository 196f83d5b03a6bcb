"""The verdict on a failed run, as every engine reaches it (jobs/failures.py): which restart it
gets, and when the node it blames is cordoned: only on what a user cannot forge."""

from __future__ import annotations

from collections.abc import Iterator

from ringleader.jobs.failures import Failure, classify, cordon_reason, cordoned_text, restart_number, restarting_text

LOST = Failure(True, "ssh to node-a failed (exit code 255): the node or its network is lost", "node-a")
GLOO = "RuntimeError: [gloo/transport/tcp/pair.cc:598] Connection reset by peer"


def test_restarts_are_counted_up_to_the_limit_and_never_past_a_time_limit() -> None:
    assert [restart_number(used, 2) for used in range(4)] == [1, 2, None, None]
    assert restart_number(0, 3, at_time_limit=True) is None
    assert restart_number(0, 0) is None
    assert restarting_text("root cause: w-1 failed (exit code 1); it exited", 1, 2) == (
        "root cause: w-1 failed (exit code 1); it exited; restart 1 of 2 (--max-restarts)")  # fmt: skip


def test_a_node_the_engine_saw_fail_twice_is_cordoned_with_its_evidence() -> None:
    assert cordon_reason([("train", LOST.why)], LOST, "job train", cordoned=False) is None
    reason = cordon_reason([("train", LOST.why)] * 2, LOST, "job train", cordoned=False)
    assert reason == f"blamed for 2 failures, the last of job train: {LOST.why}"
    assert cordoned_text("node-a", reason, "drained in Slurm") == (
        f"node node-a cordoned: {reason}; drained in Slurm; `ringleader node uncordon node-a` ends it")  # fmt: skip
    assert cordon_reason([("train", LOST.why)] * 3, LOST, "job train", cordoned=True) is None  # once is enough
    exited = Failure(False, "the program exited with code 1")
    assert cordon_reason([("train", LOST.why)] * 5, exited, "job train", cordoned=False) is None


def test_a_jobs_own_log_text_never_cordons_a_node_several_jobs_logs_do() -> None:
    """A program can print NCCL's or Gloo's words itself: one job's log counts once however
    often it says them; the same words from another job on the same node count again."""
    said = classify(1, "", "node-a", False, GLOO)
    assert said.node_fault and said.node == "node-a"
    own = [("liar", said.why)] * 5
    assert cordon_reason(own, said, "job liar", cordoned=False) is None
    assert cordon_reason([*own, ("other", said.why)], said, "job other", cordoned=False) is not None
    assert cordon_reason([("liar", said.why), ("liar", LOST.why)], LOST, "job liar", cordoned=False) is not None


def test_a_silent_host_is_cordoned_on_its_first_failure() -> None:
    """The engine heard nothing from the host (no text of the job's): the restart goes elsewhere."""
    silent = classify(None, "host node-a lost: silent for 11 s (down or cut off)", "node-a", True, "")
    assert (silent.node_fault, silent.node) == (True, "node-a")
    reason = cordon_reason([("train", silent.why)], silent, "job train", cordoned=False)
    assert reason == "blamed for 1 failure, the last of job train: host node-a lost: silent for 11 s (down or cut off)"
    forged = classify(1, "", "node-a", False, "host node-a lost: silent for 11 s")  # the same words, in a log
    assert not forged.node_fault


def test_one_job_cordons_one_node_at_most() -> None:
    """A job whose failures blame a second node leaves it in service: a second cordon on one
    job's word takes an administrator (`ringleader node cordon`). Other jobs' cordons and the
    administrator's own do not count against it."""
    first = cordon_reason([("train", LOST.why)] * 2, LOST, "job train", cordoned=False)
    assert first is not None
    second = Failure(True, "ssh to node-b failed (exit code 255): the node or its network is lost", "node-b")
    twice = [("train", second.why)] * 2
    assert cordon_reason(twice, second, "job train", cordoned=False, cordons=[first]) is None
    assert cordon_reason(twice, second, "job trainer", cordoned=False, cordons=[first]) is not None
    assert cordon_reason(twice, second, "job train", cordoned=False, cordons=["maintenance on node-a"]) is not None
    assert cordon_reason(twice, second, "gang ns/train", cordoned=False, cordons=[first]) is not None


def test_the_cordons_are_read_only_where_a_cordon_may_follow() -> None:
    """Kubernetes reads every node to count a gang's cordons: only once a node is to be cordoned."""
    read: list[bool] = []

    def cordons() -> Iterator[str]:
        read.append(True)
        yield from ()

    assert cordon_reason([("ns/train", LOST.why)], LOST, "gang ns/train", cordoned=False, cordons=cordons()) is None
    assert not read
    twice = [("ns/train", LOST.why)] * 2
    assert cordon_reason(twice, LOST, "gang ns/train", cordoned=False, cordons=cordons()) is not None
    assert read
