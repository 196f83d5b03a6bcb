"""Team queues on a real Slurm with slurmdbd (a private MariaDB): a queue is an account and a QOS
whose GrpTRES is its quota, so it binds every user's jobs, ringleader's and plain sbatch ones;
ringleader places and starts on top of it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.slurm.conftest import running_box
from engines.slurm.helpers import PY
from rankprograms import checkpointing_rank
from ringleader.engines.slurm import SlurmEngine
from ringleader.engines.slurm.sandbox import Sandbox
from ringleader.errors import UsageError
from ringleader.jobs.queues import QueueView
from ringleader.jobs.spec import JobSpec
from ringleader.jobs.states import JobStatus
from ringleader.scheduler.order import QueueOrder
from ringleader.scheduler.teams import TeamQueue
from waiting import wait_for

pytestmark = pytest.mark.slow

# Another user of the cluster, who never heard of ringleader (nobody, as `setpriv` runs it). It
# may read every file (CAP_DAC_READ_SEARCH, nothing more): a clone in a 0700 folder, its venv
# too, is closed to other users, and Slurm judges the user by uid, not by what it may read.
OTHER_USER = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
              "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]  # fmt: skip


@pytest.fixture(scope="module")
def slurm_box() -> Iterator[Sandbox]:
    """This module's cluster keeps accounts: slurmdbd on a private MariaDB."""
    for box in running_box(accounting=True):
        box.root.chmod(0o755)  # another user's sbatch and sacctmgr read slurm.conf
        yield box


def sacctmgr(*args: str) -> list[str]:
    done = subprocess.run(["sacctmgr", "-n", "-P", *args], capture_output=True, text=True, check=True)
    return done.stdout.split()


def squeue(ident: str, fields: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", ident, "-o", fields], capture_output=True, text=True).stdout.strip()


def other_users_job(gpus: int) -> str:
    """A plain sbatch of another user in account team-a (its QOS its default)."""
    argv = [*OTHER_USER, "sbatch", "--parsable", "--account=team-a", f"--gres=gpu:{gpus}", "--output=/dev/null",
            "--chdir=/tmp", "--wrap", "sleep 300"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "HOME": "/tmp"})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_queue_is_a_slurm_account_and_qos_that_binds_every_users_jobs(
    engine: SlurmEngine, tmp_path: Path
) -> None:
    """`queue create` makes the QOS (GrpTRES=gres/gpu=4, the queue's order in its Description) and
    the account (fair-share shares = the weight) in slurmdbd. Another user's plain sbatch in the
    account counts against the quota, so ringleader's job in the queue waits with the queue's
    numbers, and Slurm itself holds a job over the QOS; the other job's GPU-minutes are the
    queue's usage; once it ends ringleader's starts, submitted with --account/--qos."""
    engine.create_queue(TeamQueue("team-a", (("*", 4),), weight=2, order=QueueOrder.LAS))
    try:
        shown_qos = subprocess.run(["sacctmgr", "-n", "-P", "show", "qos", "team-a", "format=Name,GrpTRES,Description"],
                                   capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert shown_qos == "team-a|gres/gpu=4|ringleader queue order=las\n"  # the order: no Slurm field for it
        assert "team-a||2|team-a" in sacctmgr("show", "assoc", "format=Account,User,Fairshare,QOS")
        subprocess.run(["sacctmgr", "-i", "add", "user", "nobody", "account=team-a"], check=True, capture_output=True)
        theirs = other_users_job(3)
        wait_for(lambda: squeue(theirs, "%T") == "RUNNING", what="the other user's job to run")
        over = other_users_job(2)  # 3 + 2 > 4: Slurm holds it, whatever ringleader does
        wait_for(lambda: squeue(over, "%r") == "QOSGrpGRES", what="Slurm to hold the job over the QOS")
        assert [q.order for q in engine.slurm_queues.queues() if q.name == "team-a"] == [QueueOrder.LAS]
        listed = team_a(engine)
        assert (listed.quota, listed.weight, listed.held) == ((("*", 4),), 2.0, {"*": 3})
        ours = engine.submit(JobSpec("ours", workers=2, gpus_per_worker=1, command=[PY, "-c", "pass"],
                                     queue="team-a"))  # fmt: skip
        assert ours.job is not None and ours.job.status is JobStatus.PENDING
        assert ours.job.reason == "queue team-a holds 3 of its quota of 4 GPUs; it needs 2 more and the queue is in " \
                                  "no cohort to borrow from"  # fmt: skip
        # Slurm counts the other user's GPU-minutes at its next PriorityCalcPeriod (a minute here):
        # the queue's usage and fair share are Slurm's, not only ringleader's own jobs'
        wait_for(lambda: team_a(engine).usage_gpu_h > 0, 150, "Slurm to count team-a's GPU use")
        assert team_a(engine).fair_share < 1.0
        subprocess.run(["scancel", over, theirs], check=True)
        done = engine.wait("ours", 90)
        assert done.status is JobStatus.SUCCEEDED, (done.reason, done.events)
        [slurm_id] = {e.message.split()[2].rstrip(":") for e in done.events if e.kind == "SlurmSubmitted"}
        shown = subprocess.run(["scontrol", "-o", "show", "job", slurm_id], capture_output=True, text=True).stdout
        assert "Account=team-a" in shown and "QOS=team-a" in shown
    finally:
        subprocess.run(["scancel", "-A", "team-a"], capture_output=True)
        wait_for(lambda: not squeue_account("team-a"), what="team-a's jobs gone")
        engine.delete_queue("team-a")
    assert not [q for q in engine.queues() if q.name == "team-a"]
    assert sacctmgr("show", "qos", "team-a", "format=Name") == []


def team_a(engine: SlurmEngine) -> QueueView:
    [view] = [q for q in engine.queues() if q.name == "team-a"]
    return view


def squeue_account(account: str) -> str:
    return subprocess.run(["squeue", "-h", "-A", account], capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("queue, said", [
    (TeamQueue("lab-a", (("*", 4),), cohort="lab"), "--cohort: Slurm lends no idle quota between accounts"),
    (TeamQueue("lab-a", (("v100", 4),)), "--gpus TYPE=N: ringleader's Slurm nodes declare one GRES type per GPU"),
    (TeamQueue("lab-a", (("*", 4),), weight=1.5), "--weight 1.5: Slurm's fair-share shares are whole numbers"),
])  # fmt: skip
def test_what_slurm_cannot_keep_is_refused_in_one_line(engine: SlurmEngine, queue: TeamQueue, said: str) -> None:
    with pytest.raises(UsageError) as refused:
        engine.create_queue(queue)
    assert refused.value.message.startswith(said) and refused.value.fix
    assert sacctmgr("show", "account", "lab-a", "format=Account") == []  # nothing made


def test_queue_commands_go_through_sacctmgr_and_a_user_without_rights_is_told_what_to_ask(
    slurm_box: Sandbox, tmp_path: Path
) -> None:
    """The CLI on Slurm: create, list and delete are slurmdbd's; another user, not a Slurm
    administrator, gets one line with the sacctmgr commands to ask the administrator for, and
    one line too when they are not in the queue's account (sbatch would refuse their job)."""
    env = {**os.environ, "RINGLEADER_HOME": str(tmp_path / "home")}

    def cli(*args: str, user: list[str] | None = None) -> subprocess.CompletedProcess[str]:
        argv = [*(user or []), PY, "-m", "ringleader.cli.main", *args[:2], "--engine", "slurm", *args[2:]]
        return subprocess.run(argv, env=env, capture_output=True, text=True)

    made = cli("queue", "create", "team-b", "--gpus", "4", "--weight", "3")
    assert made.returncode == 0 and made.stdout == "queue/team-b created\n", made.stderr
    again = cli("queue", "create", "team-b", "--gpus", "4")
    assert again.returncode == 1 and again.stderr.startswith("error: queue 'team-b' already exists")
    assert cli("queue", "create", "team-b", "--gpus", "6", "--weight", "3", "--overwrite").returncode == 0
    listed = {q["name"]: q for q in json.loads(cli("queue", "list", "-o", "json").stdout)}
    assert (listed["team-b"]["quota"], listed["team-b"]["weight"]) == ({"*": 6}, 3) and "default" in listed
    assert sacctmgr("show", "qos", "team-b", "format=GrpTRES") == ["gres/gpu=6"]
    env["RINGLEADER_HOME"] = f"/tmp/rl-nobody-{os.getpid()}"  # theirs, made by them
    refused = cli("queue", "create", "team-c", "--gpus", "2", user=OTHER_USER)
    outsider = cli("submit", "mpi", "--name", "x", "--queue", "team-b", "--workers", "1", "--gpus", "1", "--", "true",
                   user=OTHER_USER)  # fmt: skip
    assert outsider.returncode == 1 and len(outsider.stderr.splitlines()) == 1, outsider.stderr
    assert outsider.stderr.startswith("error: user 'nobody' is not in Slurm account team-b, so their jobs may not use "
                                      "queue team-b. To fix: ask the Slurm administrator to run `sacctmgr -i add user "
                                      "nobody account=team-b`"), outsider.stderr  # fmt: skip
    shutil.rmtree(env["RINGLEADER_HOME"], ignore_errors=True)
    assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith("error: sacctmgr refused 'nobody': only a Slurm administrator may change "
                                     "accounts and QOS. To fix: ask the administrator to run `sacctmgr -i add qos "
                                     "team-c GrpTRES=gres/gpu=2`"), refused.stderr  # fmt: skip
    env["RINGLEADER_HOME"] = str(tmp_path / "home")
    assert cli("queue", "delete", "team-b").stdout == "queue/team-b deleted\n"
    assert sacctmgr("show", "account", "team-b", "format=Account") == []


def test_a_slurm_queue_ordered_srtf_starts_its_shorter_job_first(engine: SlurmEngine) -> None:
    """`queue create --order srtf` on Slurm: kept with the queue, listed, and the queue's next
    pass starts the waiting job with the shorter --run-time, though it was submitted last; a
    dry run meanwhile says the queue's quota holds a new job back."""
    engine.create_queue(TeamQueue("short-first", (("*", 4),), order=QueueOrder.SRTF))
    sleeper = [PY, "-c", "import time; time.sleep(600)"]
    engine.submit(JobSpec("held", 4, 1, sleeper, queue="short-first"))  # the queue's whole quota
    engine.submit(JobSpec("long", 4, 1, sleeper, queue="short-first", run_time_s=5 * 3600.0))
    engine.submit(JobSpec("short", 4, 1, sleeper, queue="short-first", run_time_s=600.0))
    assert engine.get("long").status is engine.get("short").status is JobStatus.PENDING
    assert {q.name: q.order for q in engine.queues()}["short-first"] is QueueOrder.SRTF
    # a dry run decides as the queue would: over quota, though node-b's GPUs are free
    peek = engine.submit(JobSpec("peek", 4, 1, sleeper, queue="short-first"), dry_run=True).decision
    assert not peek.ok and peek.reasons[0].startswith("queue short-first holds 4 of its quota of 4 GPUs"), peek
    engine.delete(["held"])
    wait_for(lambda: engine.get("short").status is JobStatus.RUNNING, what="the shorter job to start")
    assert engine.get("long").status is JobStatus.PENDING


def test_the_queue_view_on_slurm_list_describe_hold_release(slurm_box: object, tmp_path: Path) -> None:
    """What an operator reads of ringleader's queue on Slurm, through the CLI as on the embedded
    engine: QUEUE and REASON in `list`, `queue describe`'s line, hold/release and a new priority
    for a job that waits in ringleader's queue."""
    env = {**os.environ, "RINGLEADER_HOME": str(tmp_path / "home")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "ringleader.cli.main", *args], env=env, capture_output=True, text=True)

    def ok(*args: str) -> str:
        done = cli(*args)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    def reasons() -> dict[str, tuple[str, str]]:
        lines = ok("list").splitlines()
        head = lines[0].split()
        return {row.split()[0]: (row.split()[head.index("QUEUE")], row.split()[head.index("REASON")])
                for row in lines[1:]}  # fmt: skip

    ok("engine", "use", "slurm")
    ok("queue", "create", "view-a", "--gpus", "4")
    sleeper = ["--", PY, "-c", "import time; time.sleep(120)"]
    try:
        ok("submit", "mpi", "--name", "fill", "--workers", "2", "--gpus", "4", *sleeper)
        ok("submit", "mpi", "--name", "second", "--queue", "view-a", "--workers", "1", "--gpus", "4", *sleeper)
        ok("submit", "mpi", "--name", "huge", "--queue", "view-a", "--workers", "2", "--gpus", "4", *sleeper)
        wait_for(lambda: reasons().get("fill") == ("default", "-"), what="fill running")
        assert reasons()["second"] == ("view-a", "Resources")
        assert reasons()["huge"] == ("view-a", "OverMaximum")
        assert json.loads(ok("get", "huge", "-o", "json"))["reason"].startswith(
            "the job asks for 8 GPUs and queue view-a can never hold more than 4")
        assert ok("hold", "second") == "job 'second' held\n"
        assert reasons()["second"] == ("view-a", "Held")
        line = json.loads(ok("queue", "describe", "view-a", "-o", "json"))["waiting"]
        assert [(w["name"], w["place"]) for w in line] == [("huge", 1), ("second", None)]
        running = cli("hold", "fill")
        assert running.returncode == 1 and "only a job that waits can be held" in running.stderr
        assert ok("release", "second") == "job 'second' released\n"
        assert reasons()["second"] == ("view-a", "Resources")
        assert ok("update", "second", "--priority", "5") == "job 'second' priority 5\n"
        assert json.loads(ok("get", "second", "-o", "json"))["priority"] == 5
    finally:
        cli("delete", "--now", "fill", "second", "huge")
    ok("queue", "delete", "view-a")


def preempted(engine: SlurmEngine, name: str) -> list[str]:
    return [e.message for e in engine.get(name).events if e.kind == "Preempted"]


def test_a_slurm_queue_ordered_srtf_stops_its_longer_preemptible_job_for_a_short_one(
    engine: SlurmEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Preemption for order on Slurm: in a queue ordered srtf, a short job that arrives while two
    long ones hold every GPU waits while their runs are younger than the minimum run before
    preemption (RINGLEADER_PREEMPT_MIN_RUN_S), then stops the --preemptible one: its Slurm job
    is cancelled (its ranks checkpoint on SIGTERM), its event says "for order", the short job
    starts on its GPUs, and the long one runs again once the short one is done. The
    --non-preemptible twin runs on untouched."""
    monkeypatch.setenv("RINGLEADER_PREEMPT_MIN_RUN_S", "3600")
    engine.create_queue(TeamQueue("order-q", (("*", 8),), order=QueueOrder.SRTF))
    folder = tmp_path / "long"
    folder.mkdir()
    long_run = {"queue": "order-q", "run_time_s": 5 * 3600.0}
    engine.submit(JobSpec("long", 4, 1, [PY, "-c", checkpointing_rank(folder)], **long_run))  # type: ignore[arg-type]
    engine.submit(JobSpec("kept", 4, 1, [PY, "-c", "import time; time.sleep(600)"], preemptible=False,
                          **long_run))  # type: ignore[arg-type]  # fmt: skip
    wait_for(lambda: engine.get("long").status is engine.get("kept").status is JobStatus.RUNNING,
             what="both long jobs to run")  # fmt: skip
    freed, held = gpus_of(engine, "long"), gpus_of(engine, "kept")
    assert len(freed) == len(held) == 4 and not freed & held
    short = JobSpec("short", 4, 1, [PY, "-c", "import time; time.sleep(3)"], queue="order-q", run_time_s=60.0)
    waits = engine.submit(short).decision
    assert not waits.ok and waits.preemption is None, waits  # both ran less than the hour: nobody is stopped
    assert not preempted(engine, "long")
    monkeypatch.setenv("RINGLEADER_PREEMPT_MIN_RUN_S", "5")  # the administrator shortens it
    wait_for(lambda: preempted(engine, "long"), what="the long preemptible job to be stopped for order")
    [said] = preempted(engine, "long")
    assert said.startswith("by job short (priority 0), for order: queue order-q is ordered srtf and job short has "
                           "~60 s left, ranked before this job"), said  # fmt: skip
    assert "cancelled (SIGTERM, then SIGKILL after KillWait); then requeued" in said
    wait_for(lambda: engine.get("short").status is JobStatus.SUCCEEDED, what="the short job to run and end")
    assert gpus_of(engine, "short") == freed  # it ran on the GPUs the stopped job gave up
    for rank in range(4):
        assert (folder / f"ckpt-{rank}").read_text() == "step 42"  # each rank checkpointed on SIGTERM
    wait_for(lambda: engine.get("long").status is JobStatus.RUNNING, what="the long job to run again")
    assert engine.get("long").restarts == 1
    assert engine.get("kept").status is JobStatus.RUNNING and not preempted(engine, "kept")
    assert engine.get("kept").restarts == 0 and gpus_of(engine, "kept") == held


def gpus_of(engine: SlurmEngine, name: str) -> set[tuple[str | None, int]]:
    return {(i.node, gpu) for i in engine.get(name).instances for gpu in i.gpus}
