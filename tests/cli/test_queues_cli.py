"""Team queues on the embedded engine, through the CLI: a queue borrows the idle quota of its
cohort, the lender's job takes it back by preempting a whole borrowing gang (requeued), pending
reasons name the queue and its numbers, and bad input changes nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from clijobs import events, job, wait_for
from rendering import REPO

pytestmark = pytest.mark.slow  # multi-process runs of seconds each: run early (tests/conftest.py)

Cli = Any  # the `seeds_cli` fixture of tests/cli/conftest.py (2 nodes x 8 GPUs)


def queues(cli: Cli) -> dict[str, dict[str, Any]]:
    return {q["name"]: q for q in json.loads(cli.ok("queue", "list", "-o", "json"))}


def submit(cli: Cli, name: str, queue: str, gpus: int, *extra: str) -> None:
    cli.ok("submit", "mpi", "--name", name, "--queue", queue, "--workers", str(gpus), "--gpus", "1", "--gputopology",
           *extra, "--", "sleep", "600")  # fmt: skip


def test_a_borrowing_gang_is_reclaimed_when_the_lender_submits(seeds_cli: Cli) -> None:
    seeds_cli.ok("queue", "create", "team-a", "--gpus", "8", "--cohort", "lab")
    seeds_cli.ok("queue", "create", "team-b", "--gpus", "8", "--cohort", "lab")
    submit(seeds_cli, "b1", "team-b", 8)
    submit(seeds_cli, "b2", "team-b", 8)  # team-a is idle: team-b borrows its 8 GPUs
    assert job(seeds_cli, "b1")["status"] == job(seeds_cli, "b2")["status"] == "RUNNING"
    [scheduled] = events(job(seeds_cli, "b2"), "Scheduled")
    assert "queue team-b borrows 8 GPU(s) of cohort lab's idle quota" in scheduled
    listed = queues(seeds_cli)["team-b"]
    assert (listed["held"], listed["borrowed"], listed["running"]) == ({"*": 16}, 8, 2)
    # team-a's job fits its own quota, which team-b borrowed: one whole gang of team-b goes
    submit(seeds_cli, "a1", "team-a", 4)
    preempted = [name for name in ("b1", "b2") if events(job(seeds_cli, name), "Preempted")]
    assert len(preempted) == 1
    [said] = events(job(seeds_cli, preempted[0]), "Preempted")
    assert said.startswith("by job a1 of queue team-a, which takes back the quota this job's queue borrowed and "
                           "starts on")  # fmt: skip
    assert wait_for(seeds_cli, "a1", "RUNNING")["placement"]["chosen"]
    victim = wait_for(seeds_cli, preempted[0], "PENDING")
    assert "RINGLEADER_RESTARTS=1" in events(job(seeds_cli, preempted[0]), "Requeued")[0]
    # back in the queue, it would borrow again, and the cohort has only 4 GPUs of quota left
    assert victim["reason"] == ("queue team-b holds 8 of its quota of 8 GPUs; it needs 8 more, and cohort lab has 4 "
                                "idle to lend")  # fmt: skip
    listed = queues(seeds_cli)
    assert (listed["team-a"]["held"], listed["team-b"]["held"]) == ({"*": 4}, {"*": 8})
    assert listed["team-b"]["pending"] == 1 and listed["team-b"]["borrowed"] == 0


def test_over_quota_a_job_waits_with_its_queues_numbers_though_gpus_are_free(seeds_cli: Cli) -> None:
    seeds_cli.ok("queue", "create", "small", "--gpus", "4")
    submit(seeds_cli, "s1", "small", 4)
    submit(seeds_cli, "s2", "small", 2)
    waiting = job(seeds_cli, "s2")
    assert waiting["status"] == "PENDING"
    assert waiting["reason"] == ("queue small holds 4 of its quota of 4 GPUs; it needs 2 more and the queue is in no "
                                 "cohort to borrow from")  # fmt: skip
    # a job without --queue is in the default queue, which has no quota
    seeds_cli.ok("submit", "mpi", "--name", "free", "--workers", "8", "--gpus", "1", "--", "sleep", "600")
    assert job(seeds_cli, "free")["status"] == "RUNNING"
    # a bigger quota lets it start at once; a queue with jobs cannot be deleted
    seeds_cli.ok("queue", "create", "small", "--gpus", "6", "--overwrite")
    assert job(seeds_cli, "s2")["status"] == "RUNNING"
    refused = seeds_cli("queue", "delete", "small")
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: queue 'small' has 2 waiting or running job(s), s1 first")
    seeds_cli.ok("delete", "s1", "s2")
    seeds_cli.ok("queue", "delete", "small")
    assert "small" not in queues(seeds_cli)


def test_a_dry_run_says_what_the_queue_would_decide_and_changes_nothing(seeds_cli: Cli) -> None:
    seeds_cli.ok("queue", "create", "small", "--gpus", "4")
    plan = json.loads(seeds_cli.ok("submit", "mpi", "--name", "s1", "--queue", "small", "--workers", "4", "--gpus", "1",
                                   "--dry-run", "-o", "json", "--", "sleep", "600"))  # fmt: skip
    assert plan["plan"]["code"] == "Success"  # it would start now
    submit(seeds_cli, "s1", "small", 4)
    shown = seeds_cli.ok("submit", "mpi", "--name", "s2", "--queue", "small", "--workers", "2", "--gpus", "1",
                         "--dry-run", "--", "sleep", "600")  # fmt: skip
    # the GPUs are free, but the queue's quota is not: as the real submit decides
    assert "Pending:     queue small holds 4 of its quota of 4 GPUs; it needs 2 more" in shown
    assert seeds_cli("get", "s2").returncode == 1  # nothing was written
    assert queues(seeds_cli)["small"]["pending"] == 0


def test_a_queue_ordered_srtf_starts_its_shorter_job_first_and_says_its_order(seeds_cli: Cli) -> None:
    seeds_cli.ok("queue", "create", "short-first", "--gpus", "8", "--order", "srtf")
    submit(seeds_cli, "held", "short-first", 8)  # the queue's whole quota
    submit(seeds_cli, "long", "short-first", 8, "--run-time", "5h")
    submit(seeds_cli, "short", "short-first", 8, "--run-time", "10m")  # submitted last
    assert job(seeds_cli, "long")["status"] == job(seeds_cli, "short")["status"] == "PENDING"
    seeds_cli.ok("delete", "held")
    assert wait_for(seeds_cli, "short", "RUNNING")
    assert job(seeds_cli, "long")["status"] == "PENDING"
    listed = queues(seeds_cli)
    assert (listed["short-first"]["order"], listed["default"]["order"]) == ("srtf", "fifo")
    assert "srtf" in seeds_cli.ok("queue", "list")


def test_bad_input_is_one_line_and_changes_nothing(seeds_cli: Cli) -> None:
    seeds_cli.ok("queue", "create", "team-a", "--gpus", "8", "--cohort", "lab")
    cases = [
        (("submit", "mpi", "--name", "x", "--queue", "nope", "--", "true"), 1, "error: queue 'nope' not found"),
        (("submit", "mpi", "--name", "x", "--queue", "Bad_Q", "--", "true"), 2, "error: invalid queue name 'Bad_Q'"),
        (("queue", "create", "team-a", "--gpus", "4"), 1, "error: queue 'team-a' already exists"),
        (("queue", "create", "t", "--gpus", "v100=4", "--cohort", "lab"), 2,
         "error: queue team-a of cohort lab counts its quota for every GPU type at once, and this one does not"),
        (("queue", "create", "t", "--gpus", "8", "--gpus", "v100=4"), 2,
         "error: --gpus N (every type) and --gpus TYPE=N (one type) are both given"),
        (("queue", "create", "t", "--gpus", "-1"), 2, "error: --gpus '-1' must be 0 to"),
        (("queue", "create", "default", "--gpus", "1"), 2, "error: 'default' is the queue of jobs submitted"),
        (("queue", "delete", "nope"), 1, "error: queue 'nope' not found"),
        (("queue", "create", "t", "--gpus", "4", "--order", "sjf"), 2,
         "error: Invalid value for '--order': 'sjf' is not one of 'fifo', 'las', 'srtf'"),
    ]  # fmt: skip
    before = seeds_cli.dump()
    for args, code, said in cases:
        out = seeds_cli(*args)
        assert (out.returncode, out.stderr.count("\n")) == (code, 1), (args, out.stderr)
        assert out.stderr.startswith(said), (args, out.stderr)
        assert "Traceback" not in out.stderr
    assert seeds_cli.dump() == before



def test_on_the_embedded_engine_a_queue_binds_the_jobs_of_its_home_only(seeds_cli: Cli, tmp_path: Path) -> None:
    """As `queue --help` says: the queues are kept in one home's state, so another user's home
    (another RINGLEADER_HOME) has none of them and its jobs cannot name them."""
    assert "one user: kept in this home's state" in " ".join(seeds_cli.ok("queue", "--help").split())
    seeds_cli.ok("queue", "create", "small", "--gpus", "4")
    other = {**seeds_cli.env, "RINGLEADER_HOME": str(tmp_path / "other-home")}

    def theirs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(seeds_cli.argv(*args), env=other, capture_output=True, text=True)

    assert theirs("cluster", "apply", "-f", str(REPO / "examples" / "seeds-cluster.yaml")).returncode == 0
    assert [q["name"] for q in json.loads(theirs("queue", "list", "-o", "json").stdout)] == ["default"]
    refused = theirs("submit", "mpi", "--name", "x", "--queue", "small", "--", "true")
    assert refused.returncode == 1 and refused.stderr.startswith("error: queue 'small' not found")
    assert "small" in queues(seeds_cli)
