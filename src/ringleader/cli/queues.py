"""Team queue commands: queue create / list / describe / delete, and what changes a waiting
job: hold, release, update --priority (the rules: docs/queues.md).

Parse and render only: every command calls the chosen engine's ``TeamQueues`` or ``WaitingJobs``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import click

from ringleader.cli.jobs import complete_jobs, engine_option, using_engine
from ringleader.cli.output import INDENT, console, duration, emit_data, key_values, output_option, table
from ringleader.cli.params import FiniteFloat
from ringleader.engines.base import Engine, TeamQueues, WaitingJobs
from ringleader.errors import NotFoundError, UsageError
from ringleader.jobs.queues import InLine, QueueView, check_deletable, line_of, parse_quota
from ringleader.jobs.states import JobStatus
from ringleader.scheduler.order import QueueOrder
from ringleader.scheduler.teams import TeamQueue


@click.group("queue")
def queue() -> None:
    """Team queues: GPU quotas, borrowing inside a cohort, fair share (as Kueue's ClusterQueues).

    \b
    Whose jobs a queue binds depends on the engine:
      embedded    one user: kept in this home's state (~/.ringleader or RINGLEADER_HOME), the
                  queues bind the jobs submitted from it only; another user's home has its own
      slurm       every user: a queue is a slurmdbd account with a QOS of its name (quota:
                  GrpTRES=gres/gpu=N, weight: fair-share shares), written with sacctmgr
      kubernetes  every user: the ConfigMap ringleader-queues that ringleader's scheduler reads
    """


@queue.command("create")
@click.argument("name")
@click.option("--gpus", "quota", multiple=True, required=True, metavar="N|TYPE=N",
              help="The queue's quota: N GPUs of every type, or N of one GPU type (repeatable; the type as "
                   "`top node` shows it, e.g. v100=8).")  # fmt: skip
@click.option("--weight", type=FiniteFloat(0, 1e6, low_open=True), default=1.0, show_default=True,
              help="Its fair share against the other queues' weights.")
@click.option("--cohort", default=None, metavar="NAME",
              help="Queues of one cohort lend each other the quota they leave idle, and take it back "
                   "(not on Slurm, whose QOS limits are hard).")
@click.option("--namespaces", "namespaces", multiple=True, metavar="NS[,NS...]",
              help="Kubernetes: the namespaces whose jobs may use the queue (comma-separated, repeatable; none "
                   "given: every namespace). A gang of another namespace naming it waits, with the reason.")
@click.option("--order", type=click.Choice([o.value for o in QueueOrder]), default=None,
              help="How the queue orders its jobs of one priority: fifo (submit order; the default), las (least "
                   "attained GPU service first, as Tiresias) or srtf (shortest predicted remaining time first, none "
                   "passed over beyond a bound).")  # fmt: skip
@click.option("--overwrite", is_flag=True, help="Replace the queue of that name (as kubectl's --overwrite).")
@engine_option
def queue_create(name: str, quota: tuple[str, ...], weight: float, cohort: str | None, namespaces: tuple[str, ...],
                 order: str | None, overwrite: bool, engine: str | None) -> None:  # fmt: skip
    """Create a team queue; jobs join it with `submit --queue NAME`."""
    listed = {n.strip() for given in namespaces for n in given.split(",") if n.strip()}
    made = TeamQueue(name, parse_quota(quota), weight, cohort, tuple(sorted(listed)),
                     QueueOrder(order) if order is not None else None)
    with using_engine(engine) as opened:
        assert isinstance(opened, TeamQueues)  # every engine keeps queues
        rt = opened
        if namespaces:
            opened.supports.require("queue_namespaces", "--namespaces")
        rt.create_queue(made, overwrite)
    click.echo(f"queue/{name} {'configured' if overwrite else 'created'}")


@queue.command("list")
@output_option("json", "yaml")
@engine_option
def queue_list(output: str, engine: str | None) -> None:
    """Each queue: quota, cohort, weight, order, the GPUs its running jobs hold and borrow, its
    jobs, its fair-share factor (1: it used nothing of its share) and recent GPU-hours."""
    with using_engine(engine) as opened:
        assert isinstance(opened, TeamQueues)  # every engine keeps queues
        rt = opened
        views = rt.queues()
    if output != "table":
        emit_data([v.to_dict() for v in views], output)
        return
    rows = [[v.name, v.quota_text, v.cohort or "-", f"{v.weight:g}", v.order.value, sum(v.held.values()), v.borrowed,
             v.running, v.pending, f"{v.fair_share:.2f}", f"{v.usage_gpu_h:.2f}"] for v in views]  # fmt: skip
    console().print(table(["NAME", "QUOTA", "COHORT", "WEIGHT", "ORDER", "GPUS_HELD", "BORROWED", "RUNNING",
                           "PENDING", "FAIR_SHARE", "GPU_HOURS"], rows))  # fmt: skip


@queue.command("delete")
@click.argument("names", nargs=-1, required=True)
@engine_option
def queue_delete(names: tuple[str, ...], engine: str | None) -> None:
    """Delete queues no waiting or running job is in."""
    for name in names:
        check_deletable(name)
    with using_engine(engine) as opened:
        assert isinstance(opened, TeamQueues)  # every engine keeps queues
        rt = opened
        for name in names:
            rt.delete_queue(name)
            click.echo(f"queue/{name} deleted")


@queue.command("describe")
@click.argument("name")
@output_option("json", "yaml")
@engine_option
def queue_describe(name: str, output: str, engine: str | None) -> None:
    """One queue: its quota, the GPUs its running jobs hold and borrow, its fair-share standing,
    and its waiting jobs in the order the queue starts them, each with its place in line (among
    every queue's jobs), its effective priority and why it waits (Kueue's pending workloads,
    Slurm's sprio)."""
    with using_engine(engine) as opened:
        assert isinstance(opened, TeamQueues)  # every engine keeps queues
        views = opened.queues()
        waiting = opened.list_jobs([JobStatus.QUEUING, JobStatus.PENDING])
    view = next((v for v in views if v.name == name), None)
    if view is None:
        raise NotFoundError(f"queue {name!r} not found", "see `ringleader queue list`")
    line = [one for one in line_of(views, waiting, time.time()) if one.job.queue == name]
    if output != "table":
        emit_data({**view.to_dict(), "waiting": [one.to_dict() for one in line]}, output)
        return
    render_queue(view, line)


def render_queue(view: QueueView, line: list[InLine]) -> None:
    held = sum(view.held.values())
    key_values([
        ("Name", view.name), ("Quota", view.quota_text), ("Cohort", view.cohort or "-"), ("Weight", f"{view.weight:g}"),
        ("GPUs held", f"{held}" + (f" ({view.borrowed} borrowed from the cohort)" if view.borrowed else "")),
        ("Fair share", f"{view.fair_share:.2f} (1: it used nothing of its share; recent use "
                       f"{view.usage_gpu_h:.2f} GPU-hours)"),
        ("Jobs", f"{view.running} running, {view.pending} waiting"),
    ])  # fmt: skip
    click.echo("\nWaiting, in the order the queue starts them:")
    rows = [[one.place or "-", one.job.name, one.job.priority, f"{one.effective_priority:.1f}",
             one.job.gpus_requested, duration(one.job.age), one.job.reason_code or "-"] for one in line]  # fmt: skip
    cols = ["PLACE", "NAME", "PRIORITY", "EFFECTIVE_PRIORITY", "GPU(Requested)", "WAITED", "REASON"]
    console().print(table(cols, rows or [["-"] * len(cols)], indent=INDENT))


@click.command("hold")
@click.argument("names", nargs=-1, required=True, shell_complete=complete_jobs)
@engine_option
def hold(names: tuple[str, ...], engine: str | None) -> None:
    """Keep waiting jobs from starting (Slurm's scontrol hold): each stays PENDING with reason
    Held, out of the queue's line, until `ringleader release`."""
    _each_waiting(names, engine, "held", lambda rt, name: rt.hold(name))


@click.command("release")
@click.argument("names", nargs=-1, required=True, shell_complete=complete_jobs)
@engine_option
def release(names: tuple[str, ...], engine: str | None) -> None:
    """Put held jobs back in the queue's line (Slurm's scontrol release); one that fits starts."""
    _each_waiting(names, engine, "released", lambda rt, name: rt.release(name))


@click.command("update")
@click.argument("names", nargs=-1, required=True, shell_complete=complete_jobs)
@click.option("--priority", required=True, metavar="N",
              help="The waiting jobs' new priority (higher runs first): their place in line follows.")
@engine_option
def update(names: tuple[str, ...], priority: str, engine: str | None) -> None:
    """Change waiting jobs (Slurm's scontrol update JobId=... Priority=N): their priority, which
    their place in line follows. A job that started keeps the priority it started with."""
    try:
        rank = int(priority)
    except ValueError:
        raise UsageError(f"--priority {priority!r} is not a number",
                         "give e.g. --priority 10 (higher runs first); a Kubernetes PriorityClass is given at "
                         "submit, with -p") from None  # fmt: skip

    def change(rt: WaitingJobs, name: str) -> None:
        assert isinstance(rt, Engine)
        rt.supports.require("priority", "--priority N")
        rt.set_priority(name, rank)

    _each_waiting(names, engine, f"priority {rank}", change)


def _each_waiting(names: tuple[str, ...], engine: str | None, done: str,
                  change: Callable[[WaitingJobs, str], None]) -> None:  # fmt: skip
    with using_engine(engine) as opened:
        assert isinstance(opened, WaitingJobs)  # every engine changes waiting jobs
        for name in dict.fromkeys(names):
            change(opened, name)
            click.echo(f"job {name!r} {done}")


def register(cli: click.Group) -> None:
    for command in (queue, hold, release, update):
        cli.add_command(command)
