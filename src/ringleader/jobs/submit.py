"""A submit, written once for every engine: each refuses, replaces and notes the same things in
the same words, because they all go through this.

    submit_job(provisioner, spec, dry_run)          # the whole submit, over an engine's verbs
    sub = prepare_submit(spec, engine.supports)     # validate, record, read the line once
    sub.spec      the spec as it will run (the user's line translated, -x values captured)
    sub.line      its command, read once: what checks and launchers read
    sub.notes     what was replaced, for the user

Engines declare what they support (``jobs.support.Support``, as SkyPilot's provisioners do); a request for
something an engine does not support is refused here, in one line, before anything is created.
What differs between engines is the few verbs of ``Provisioner``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ringleader import settings
from ringleader.errors import ConflictError, UnschedulableError, UsageError
from ringleader.jobs.commandline import prepare_spec
from ringleader.jobs.hints import model_named, read_workload
from ringleader.jobs.line import CommandLine
from ringleader.jobs.prediction import predict_job, run_time_from_steps
from ringleader.jobs.spec import JobSpec, parse_container_user, submit_env
from ringleader.jobs.support import Support
from ringleader.jobs.views import JobView, SubmitResult
from ringleader.model.tables import check_model
from ringleader.scheduler import ClusterState, Code, Decision, JobRequest, Snapshot, place, run_cycle
from ringleader.scheduler.cycle import on_hold
from ringleader.scheduler.framework import NO_SUCH_LEVEL


class ClusterUnread(Exception):
    """Raised by ``Provisioner.snapshot`` where the submitter may create jobs but not read the
    cluster (a Kubernetes user with rights in one namespace only): the job goes in without a
    plan, which the engine's own scheduler makes once it exists."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Submission:
    spec: JobSpec
    line: CommandLine
    notes: tuple[str, ...]
    dry_run: bool = False  # only the plan is asked for: nothing will start from this submit


class Provisioner(Protocol):
    """What differs between engines when a job is submitted; the rest is ``submit_job``."""

    supports: Support
    notes: list[str]  # for the user, printed after the command succeeded

    def prepare(self, sub: Submission) -> Submission:
        """The engine's own checks and rewrites of the prepared job (its image, what its hosts
        must have); a refusal is one line and changes nothing."""
        ...

    def exists(self, name: str) -> bool:
        """Whether the engine already has a job of that name."""
        ...

    def snapshot(self) -> ClusterState:
        """The cluster as the engine sees it now, to place the job on (``ClusterUnread``: the
        submitter may not read it)."""
        ...

    def check(self, decision: Decision, state: ClusterState) -> None:
        """The engine's own refusals and notes on the plan (what it cannot start there)."""
        ...

    def describe(self, sub: Submission, decision: Decision) -> dict[str, Any]:
        """What the engine creates to run the job as placed, shown with the result (Kubernetes:
        its objects); refused in one line where it cannot create them. {}: nothing to show."""
        ...

    def commit(self, sub: Submission, decision: Decision, notes: list[str], hint: str | None) -> Decision:
        """Record the job (with ``notes``, ``hint`` among them) and run the engine's queue pass,
        starting it if it fits; the job's decision in that pass (``decision``: the plan shown, for
        an engine whose own scheduler decides later)."""
        ...

    def started(self, name: str) -> JobView:
        """The job as the user sees it once submitted."""
        ...

    def queued_with(self, spec: JobSpec, state: ClusterState) -> Snapshot | None:
        """The engine's queue as its cycle would see it with ``spec`` submitted now, last in
        submit order, on ``state`` (what ``snapshot`` read); None where the engine's own
        scheduler decides elsewhere (the plan on the free GPUs is then all a dry run says)."""
        ...


def submit_job(engine: Provisioner, spec: JobSpec, dry_run: bool = False) -> SubmitResult:
    """Queue a job (started if it fits now), or with ``dry_run`` only show the plan: prepare it
    once, refuse a name in use and a gang that can never fit, note a better placement, predict."""
    sub = engine.prepare(dataclasses.replace(prepare_submit(spec, engine.supports), dry_run=dry_run))
    spec = sub.spec
    if engine.exists(spec.name):  # checked before anything is written (or created)
        raise duplicate(spec.name, engine.supports)
    try:
        state: ClusterState | None = engine.snapshot()
    except ClusterUnread as unread:
        state = None
        decision = unplanned(spec.request(), unread.reason)
    if state is not None:
        if spec.steps is not None and spec.run_time_s is None:
            spec, how = run_time_from_steps(spec, state)
            sub = dataclasses.replace(sub, spec=spec, notes=(*sub.notes, f"note: {how}") if how else sub.notes)
        decision = place(state, spec.request())
        refuse_unresolvable(decision, engine.supports)
        engine.check(decision, state)
    hint = placement_hint(state, decision) if state is not None else None
    notes = [*sub.notes, *([hint] if hint else [])]
    said = len(engine.notes)
    shown = engine.describe(sub, decision)
    if dry_run:
        engine.notes[said:said] = notes
        queued = engine.queued_with(spec, state) if state is not None and decision.ok and not spec.hold else None
        decision = decided_in_queue(queued, decision) if queued is not None else decision
        decision = on_hold(decision.job, decision.policy) if spec.hold else decision
        prediction = predict_job(state, spec, decision.placement) if state and decision.placement else None
        return SubmitResult(decision, decision.as_dict(), dry_run=True, extra={"prediction": prediction,
                                                                                       **shown})  # fmt: skip
    mine = engine.commit(sub, decision, notes, hint)
    # Held at submit (sbatch --hold): whatever an engine's own scheduler will decide, it waits.
    mine = on_hold(mine.job, mine.policy) if spec.hold else mine
    engine.notes[said:said] = notes  # before what the engine itself had to say
    return SubmitResult(mine, mine.as_dict(), dry_run=False, job=engine.started(spec.name), extra=shown)


def decided_in_queue(queued: Snapshot, planned: Decision) -> Decision:
    """What the real submit's queue cycle would decide for the job ``planned`` places: the one
    cycle every engine runs, on its queue with the job added, quotas and start rules applied
    (start now, wait for a placement that finishes sooner, over quota, behind the jobs before
    it); nothing is written."""
    for nominated in run_cycle(queued).nominated:
        if nominated.decision.job.name == planned.job.name:
            return nominated.decision
    return planned


def unplanned(job: JobRequest, reason: str) -> Decision:
    """The decision of a job submitted without a plan: it waits for the engine's scheduler."""
    return Decision(job, job.policy_name, Code.UNSCHEDULABLE, reasons=(reason,))


def duplicate(name: str, supports: Support) -> ConflictError:
    """The refusal of a name in use, naming the engine to delete it from unless it is the default."""
    where = "" if supports.engine == "embedded" else f" --engine {supports.engine}"
    return ConflictError(f"job {name!r} already exists", f"pick another --name or `ringleader delete {name}{where}`")


def prepare_submit(spec: JobSpec, supports: Support, environ: Mapping[str, str] | None = None) -> Submission:
    """Validate ``spec``, record where and from what environment it was submitted, and read and
    prepare its command line once. ``environ`` is the submitter's environment (default: this
    process's); an API caller's explicit ``spec.submit_env`` stands for it."""
    if spec.grace_s is None:  # the grace its ranks get when stopped, fixed now (see JobSpec.grace_s)
        spec = dataclasses.replace(spec, grace_s=settings.number("RINGLEADER_GRACE_S"))
    given = spec.kube.given() if spec.kube is not None else None
    if given is not None:  # before their values are read: an engine without them refuses them whatever they are
        supports.require("kube_options", given)
    spec.validate()
    if spec.image is not None:
        supports.require("image", "--image")
    if spec.time_limit_s is not None:
        supports.require("time_limit", "--time-limit")
    if spec.container.user == "submitter":  # an API caller's spelling: the CLI resolves it itself
        mine = dataclasses.replace(spec.container, user=parse_container_user("submitter"))
        spec = dataclasses.replace(spec, container=mine)
    container_options = spec.container.given()
    supports.require_container_options(container_options)
    if container_options and spec.image is None and supports.submitter_context:
        raise UsageError(f"{container_options[0]} sets up each rank's container and this job has none",
                         "add --image IMAGE, or leave the container options out")  # fmt: skip
    if spec.topology_required is not None or spec.topology_preferred is not None:
        supports.require("network_tree", "--topology-required/--topology-preferred")
    if spec.start_rule() != "now" or spec.run_time_s is not None or spec.max_wait_s is not None:
        supports.require("start_rules", "--start/--run-time/--max-wait")
    if spec.priority and not supports.priority:
        raise UsageError(f"--priority is not carried by the {supports.engine} engine: a pod's priority is its "
                         "PriorityClass's",
                         "give -p/--priority-class NAME instead, or leave --priority out")  # fmt: skip
    if spec.preempt:
        supports.require("preemption", "--preempt")
    if spec.calibration is not None:
        supports.require("calibration", "--calibration")
    if spec.workdir is None and supports.submitter_context:
        spec = dataclasses.replace(spec, workdir=working_directory())
    elif spec.workdir is not None and supports.submitter_context and not os.path.isdir(spec.workdir):
        raise UsageError(f"--working-dir {spec.workdir!r} is not a folder here: the job would fail when it starts",
                         "give an existing folder (the ranks start in it)")  # fmt: skip
    # -x NAME passes the submitter's value of NAME (the whole environment, not just the part a
    # job keeps), captured now: a queued job may start from another process much later.
    if spec.submit_env is not None:
        environ = spec.submit_env
    elif environ is None:
        environ = dict(os.environ)
    if spec.submit_env is None and supports.submitter_context:
        spec = dataclasses.replace(spec, submit_env=submit_env(dict(environ)))
    spec, line, notes = prepare_spec(spec, environ, in_image=spec.image is not None or not supports.submitter_context)
    if spec.kind == "pytorch" and line.mpirun:
        written = os.path.basename((spec.user_command or spec.command)[0])
        launcher = written if written in ("horovodrun", "mpiexec", "orterun") else "mpirun"
        raise UsageError(f"a PyTorch job starts its program once per worker itself, and this is a {launcher} line",
                         f"give the program alone (python train.py ...), or submit the {launcher} line with "
                         "`submit mpi`")  # fmt: skip
    spec, said = model_of(spec)
    notes = [*notes, *said]
    if spec.model is not None and spec.workload is None:  # read once, where the ranks start
        world = spec.workers * max(1, spec.gpus_per_worker)  # its data-parallel ranks
        spec = dataclasses.replace(spec, workload=read_workload(spec.command, spec.workdir or os.getcwd(), world))
    return Submission(dataclasses.replace(spec, line=line), line, tuple(notes))


def model_of(spec: JobSpec) -> tuple[JobSpec, list[str]]:
    """``spec`` with its --model checked (an unknown name refused, the closest known one
    suggested), or, without one, the network its program's own flags name (tf_cnn_benchmarks'
    ``--model=vgg16``, torchvision's ``--model resnet50``) where the model knows it: its
    predictions then need no --model. The note says where the model came from."""
    if spec.model is not None:
        check_model(spec.model)
        return spec, []
    named = model_named(spec.user_command or spec.command)
    if named is None:
        return spec, []
    try:
        check_model(named[0])
    except UsageError:
        return spec, []  # a network the model does not know: the job runs, unpriced, as before
    said = f"note: model {named[0]} read from the line's {named[1]} (for predictions; --model NAME overrides it)"
    return dataclasses.replace(spec, model=named[0]), [said]


def working_directory() -> str:
    try:
        return os.getcwd()
    except FileNotFoundError:
        raise UsageError("the current working directory was deleted", "cd to an existing folder and retry") from None


def refuse_unresolvable(decision: Decision, supports: Support) -> None:
    """A gang that can never fit this cluster (not "not now": never) is refused at submit, in
    the same words on every engine."""
    if decision.code is Code.UNRESOLVABLE and decision.reasons[0].startswith(NO_SUCH_LEVEL):
        raise UsageError(
            f"job {decision.job.name} names a network level the cluster lacks: {decision.reasons[0]}",
            "name one of its levels, or declare the network tree (docs/scheduler.md, Network tree)",
        )
    if decision.code is Code.UNRESOLVABLE:
        raise UnschedulableError(
            f"job {decision.job.name} can never run on this cluster: {'; '.join(decision.reasons)}",
            f"ask for fewer GPUs per worker or fewer workers, or {supports.more_room}"
            + (", or require a wider network level" if decision.job.topology_required else ""),
        )


# A placement this much faster at its narrowest link is worth a note on a submit that did not ask
# for topology-aware placement (the reference study: one node's NVLink 992 vs two nodes' 200 images/s).
HINT_RATIO = 2.0


def placement_hint(state: ClusterState, decision: Decision) -> str | None:
    """For a job placed without --gputopology: a note when the topology policy would have given
    it a bottleneck link at least HINT_RATIO times faster (fewer nodes, NVLink), else None."""
    chosen = decision.chosen
    if chosen is None or decision.job.topology_aware or decision.job.workers * decision.job.gpus_per_worker < 2:
        return None
    better = place(state, dataclasses.replace(decision.job, topology_aware=True)).chosen
    if better is None:
        return None
    mine, theirs = chosen.metrics.bottleneck, better.metrics.bottleneck
    if mine.kind == "none" or mine.gbs <= 0 or theirs.gbs < HINT_RATIO * mine.gbs:
        return None
    return (f"note: placed without --gputopology on {chosen.placement.describe()}, bottleneck {mine.kind} "
            f"{mine.gbs:g} GB/s; --gputopology would place it on {better.placement.describe()}, bottleneck "
            f"{theirs.kind} {theirs.gbs:g} GB/s ({theirs.gbs / mine.gbs:.1f}x); `--dry-run --model NAME` "
            "predicts the images/s of both")
