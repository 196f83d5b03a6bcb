"""Team queue commands: queue create / list / delete (the rules: docs/queues.md).

Parse and render only: every command calls the chosen engine's ``TeamQueues``.
"""

from __future__ import annotations

import click

from ringleader.cli.jobs import engine_option, using_engine
from ringleader.cli.output import console, emit_data, output_option, table
from ringleader.cli.params import FiniteFloat
from ringleader.engines.base import TeamQueues
from ringleader.jobs.queues import check_deletable, parse_quota
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


def register(cli: click.Group) -> None:
    cli.add_command(queue)
