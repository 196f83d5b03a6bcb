"""The queue view on the embedded engine, through the CLI as an operator reads it: `list` with
QUEUE and a one-word REASON, `list --queue`, `queue describe` with each waiting job's place in
line and effective priority, `hold`/`release`, `update --priority`, and reasons that say what
is true (cordoned nodes, GPUs reserved for a named job, a request over the queue's maximum)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from clijobs import events, job, wait_for
from ringleader.engines.embedded.engine import Runtime
from ringleader.errors import RingleaderError
from waiting import wait_for as wait_until_true

pytestmark = pytest.mark.slow  # multi-process runs of seconds each: run early (tests/conftest.py)

Cli = Any  # the `seeds_cli` fixture of tests/cli/conftest.py (2 nodes x 8 GPUs)


def submit(cli: Cli, name: str, workers: int, gpus: int, *extra: str) -> None:
    cli.ok("submit", "mpi", "--name", name, "--workers", str(workers), "--gpus", str(gpus), *extra,
           "--", "sleep", "600")  # fmt: skip


def listed(cli: Cli, *args: str) -> dict[str, dict[str, str]]:
    """`list`'s table as NAME -> column -> cell."""
    lines = cli.ok("list", *args).splitlines()
    header = lines[0].split()
    return {row.split()[0]: dict(zip(header, row.split(), strict=True)) for row in lines[1:]}


def wait_until(cli: Cli, check: Callable[[Runtime], bool], what: str) -> None:
    """Polls the state in this process (a `ringleader` start per poll burns a CPU while nothing
    changes); the test then reads what the command says."""

    def holds() -> bool:
        with Runtime.open(cli.home, readonly=True) as rt:
            try:
                return check(rt)
            except (RingleaderError, OSError):  # no instance yet, no log yet
                return False

    wait_until_true(holds, 60, what)


def described(cli: Cli, queue: str) -> dict[str, Any]:
    return json.loads(cli.ok("queue", "describe", queue, "-o", "json"))


def test_list_shows_each_jobs_queue_and_why_it_waits_in_one_word(seeds_cli: Cli) -> None:
    seeds_cli.ok("queue", "create", "team-a", "--gpus", "4")
    submit(seeds_cli, "fill", 2, 8)  # every GPU of both nodes
    submit(seeds_cli, "small", 1, 2, "--queue", "team-a")
    submit(seeds_cli, "huge", 1, 8, "--queue", "team-a")  # more than team-a may ever hold
    table = listed(seeds_cli)
    assert list(table["fill"])[-2:] == ["QUEUE", "REASON"]
    assert (table["fill"]["QUEUE"], table["fill"]["REASON"]) == ("default", "-")
    assert (table["small"]["QUEUE"], table["small"]["REASON"]) == ("team-a", "Resources")
    assert table["huge"]["REASON"] == "OverMaximum"
    huge = job(seeds_cli, "huge")
    assert huge["reason_code"] == "OverMaximum" and huge["queue"] == "team-a"
    assert huge["reason"].startswith("the job asks for 8 GPUs and queue team-a can never hold more than 4 (its quota "
                                     "of 4, in no cohort to borrow from): it never starts there")  # fmt: skip
    shown = seeds_cli.ok("get", "huge")
    assert "ReasonCode: OverMaximum" in " ".join(shown.split())
    assert set(listed(seeds_cli, "--queue", "team-a")) == {"small", "huge"}
    assert set(listed(seeds_cli, "--queue", "default")) == {"fill"}


def test_queue_describe_gives_quota_use_and_the_line_with_effective_priorities(seeds_cli: Cli) -> None:
    seeds_cli.ok("queue", "create", "team-a", "--gpus", "16", "--weight", "2")
    submit(seeds_cli, "run", 1, 8, "--queue", "team-a")
    submit(seeds_cli, "blocker", 1, 8)  # the other node, in the default queue
    submit(seeds_cli, "first", 1, 8, "--queue", "team-a")
    submit(seeds_cli, "urgent", 1, 4, "--queue", "team-a", "--priority", "10")
    view = described(seeds_cli, "team-a")
    assert (view["quota"], view["held"], view["borrowed"], view["running"], view["pending"]) == (
        {"*": 16}, {"*": 8}, 0, 1, 2)  # fmt: skip
    line = view["waiting"]
    assert [(w["place"], w["name"]) for w in line] == [(1, "urgent"), (2, "first")]
    # priority 10 ranks 10 points above priority 0 (with a little age); fair share orders the
    # queues, not the jobs inside one (docs/queues.md), so it adds nothing here
    assert round(line[0]["effective_priority"] - line[1]["effective_priority"]) == 10
    assert 0 <= line[1]["effective_priority"] < 1
    table = seeds_cli.ok("queue", "describe", "team-a")
    assert "Quota:      16 GPUs" in table and "PLACE" in table and "EFFECTIVE_PRIORITY" in table
    # raising first's priority puts it first in line
    assert seeds_cli.ok("update", "first", "--priority", "20").strip() == "job 'first' priority 20"
    assert [w["name"] for w in described(seeds_cli, "team-a")["waiting"]] == ["first", "urgent"]
    assert events(job(seeds_cli, "first"), "PriorityChanged") == ["priority 0 -> 20"]


def test_a_held_job_waits_out_of_line_until_released(seeds_cli: Cli) -> None:
    submit(seeds_cli, "fill", 2, 8)  # both nodes
    submit(seeds_cli, "next", 1, 8)
    submit(seeds_cli, "later", 1, 8)
    assert seeds_cli.ok("hold", "next").strip() == "job 'next' held"
    held = job(seeds_cli, "next")
    assert (held["status"], held["reason_code"], held["placement"]["reservation"]) == ("PENDING", "Held", None)
    assert held["reason"] == "held: it is not started until `ringleader release next`"
    assert [(w["place"], w["name"]) for w in described(seeds_cli, "default")["waiting"]] == [(1, "later"),
                                                                                              (None, "next")]
    seeds_cli.ok("delete", "fill")
    # next is skipped: the job behind it starts, and the other node stays free while it is held
    assert job(seeds_cli, "later")["status"] == "RUNNING"
    assert job(seeds_cli, "next")["status"] == "PENDING"
    assert seeds_cli.ok("release", "next").strip() == "job 'next' released"
    assert job(seeds_cli, "next")["status"] == "RUNNING"
    assert [e for e in ("Held", "Released") if events(job(seeds_cli, "next"), e)] == ["Held", "Released"]


def test_a_job_submitted_held_waits_on_an_idle_cluster_until_released(seeds_cli: Cli) -> None:
    planned = seeds_cli.ok("submit", "mpi", "--name", "peek", "--hold", "--dry-run", "--", "sleep", "600")
    assert "Pending:     held: it is not started until `ringleader release peek`" in planned
    assert job_missing(seeds_cli, "peek")
    submit(seeds_cli, "later", 1, 2, "--hold")
    assert listed(seeds_cli)["later"]["REASON"] == "Held"
    held = job(seeds_cli, "later")
    assert (held["status"], held["reason_code"]) == ("PENDING", "Held")
    assert seeds_cli.ok("release", "later").strip() == "job 'later' released"
    assert job(seeds_cli, "later")["status"] == "RUNNING"


def job_missing(cli: Cli, name: str) -> bool:
    return "not found" in cli("get", name).stderr


def test_hold_release_and_update_refuse_what_they_cannot_change_in_one_line(seeds_cli: Cli) -> None:
    submit(seeds_cli, "run", 2, 8)
    submit(seeds_cli, "wait", 1, 8)
    cases = [
        (("hold", "run"), "error: job 'run' is RUNNING: only a job that waits can be held"),
        (("release", "run"), "error: job 'run' is RUNNING: only a job that waits can be released"),
        (("update", "run", "--priority", "5"), "error: job 'run' is RUNNING: only a job that waits can be given "
                                                "another priority"),
        (("hold", "nope"), "error: job 'nope' not found"),
        (("update", "run", "--priority", "high"), "error: --priority 'high' is not a number. To fix: give e.g. "
                                                   "--priority 10"),
        (("update", "wait", "--priority", str(2**31)), "error: --priority must be a 32-bit integer"),
    ]
    for args, said in cases:
        out = seeds_cli(*args)
        assert out.returncode in (1, 2) and said in out.stderr, (args, out.stderr)
        assert "Traceback" not in out.stderr
    out = seeds_cli("release", "wait")
    assert out.returncode == 1 and "error: job 'wait' is not held" in out.stderr
    assert job(seeds_cli, "run")["priority"] == job(seeds_cli, "wait")["priority"] == 0


def test_a_job_that_would_fit_on_cordoned_nodes_says_cordoned(seeds_cli: Cli) -> None:
    seeds_cli.ok("node", "cordon", "cn-shanghai-172", "--reason", "disk swap")
    seeds_cli.ok("node", "cordon", "cn-shanghai-173", "--reason", "GPU 3 lost")
    submit(seeds_cli, "one", 1, 1)
    waiting = job(seeds_cli, "one")
    assert waiting["reason_code"] == "Cordoned"
    assert waiting["reason"].startswith("it would fit on cordoned node(s) cn-shanghai-172 (disk swap), "
                                        "cn-shanghai-173 (GPU 3 lost)")
    assert "cn-shanghai-172: cordoned (disk swap)" in waiting["reason"]
    assert "cn-shanghai-172: 0 free" not in waiting["reason"]
    seeds_cli.ok("node", "uncordon", "cn-shanghai-173")
    assert job(seeds_cli, "one")["status"] == "RUNNING"


def test_gpus_reserved_for_a_job_are_named_with_the_backfill_fix(seeds_cli: Cli) -> None:
    submit(seeds_cli, "half", 1, 4, "--gputopology", "--time-limit", "10m")
    submit(seeds_cli, "other", 1, 8, "--time-limit", "20m")
    submit(seeds_cli, "big", 2, 8)  # reserves both nodes
    submit(seeds_cli, "small", 1, 4)  # fits the free half, which big's reservation holds
    small = job(seeds_cli, "small")
    assert small["reason_code"] == "Reserved"
    assert "waits for reservation of job big: it has no time limit" in small["reason"]
    assert "a --time-limit under ~20 min would let it start now on them (backfill)" in small["reason"]
    assert "(4 reserved for job big)" in small["reason"]


RUN_SAYS = "import os, time; print('run', os.environ['RINGLEADER_RESTARTS'], flush=True); time.sleep(600)"


def test_logs_previous_shows_a_requeued_jobs_last_run(seeds_cli: Cli) -> None:
    seeds_cli.ok("submit", "mpi", "--name", "keep", "--workers", "1", "--gpus", "8", "--non-preemptible",
                 "--", "sleep", "600")  # fmt: skip
    seeds_cli.ok("submit", "mpi", "--name", "low", "--workers", "1", "--gpus", "8", "--", "python", "-c", RUN_SAYS)
    wait_for(seeds_cli, "low", "RUNNING")
    wait_until(seeds_cli, lambda rt: "run 0" in rt.logs("low"), "the first run's line")
    assert "run 0" in seeds_cli.ok("logs", "low")
    no_previous = seeds_cli("logs", "low", "--previous")
    assert no_previous.returncode == 1 and "job low has no previous run" in no_previous.stderr
    submit(seeds_cli, "urgent", 1, 8, "--priority", "10", "--preempt")
    wait_until(seeds_cli, lambda rt: rt.get("low").restarts == 1, "low preempted and requeued")
    assert job(seeds_cli, "low")["restarts"] == 1
    waiting = seeds_cli("logs", "low")  # no instance now: the run that was is --previous
    assert waiting.returncode == 1 and "has no instances yet" in waiting.stderr
    assert seeds_cli.ok("logs", "low", "--previous") == "run 0\n"
    assert seeds_cli.ok("logs", "low", "-p", "-i", "worker-0", "--timestamps").endswith("Z run 0\n")
    seeds_cli.ok("delete", "urgent")
    wait_until(seeds_cli, lambda rt: "run 1" in rt.logs("low"), "the second run's line")
    assert "run 1" in seeds_cli.ok("logs", "low")
    assert seeds_cli.ok("logs", "low", "--previous") == "run 0\n"  # the run before this one, only
    bad = seeds_cli("logs", "low", "--previous", "-f")
    assert bad.returncode == 2 and "--previous shows a run that has ended" in bad.stderr
