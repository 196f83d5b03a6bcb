"""One preparation of a submit, before any engine: every engine refuses, replaces and notes the
same things in the same words, because they all start from what this returns.

    sub = prepare_submit(spec, engine.supports)     # validate, record, read the line once
    sub.spec      the spec as it will run (the user's line translated, -x values captured)
    sub.line      its command, read once: what checks and launchers read
    sub.notes     what was replaced, for the user

Engines declare what they support (``jobs.support.Support``, as SkyPilot's provisioners do); a request for
something an engine does not support is refused here, in one line, before anything is created.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ringleader.errors import UnschedulableError, UsageError
from ringleader.jobs.commandline import CommandLine, prepare_spec
from ringleader.jobs.spec import JobSpec, submit_env
from ringleader.jobs.support import Support

if TYPE_CHECKING:
    from ringleader.scheduler import Decision


@dataclass(frozen=True)
class Submission:
    spec: JobSpec
    line: CommandLine
    notes: tuple[str, ...]


def prepare_submit(spec: JobSpec, supports: Support, environ: Mapping[str, str] | None = None) -> Submission:
    """Validate ``spec``, record where and from what environment it was submitted, and read and
    prepare its command line once. ``environ`` is the submitter's environment (default: this
    process's); an API caller's explicit ``spec.submit_env`` stands for it."""
    spec.validate()
    if spec.image is not None:
        supports.require("image", "--image")
    if spec.time_limit_s is not None:
        supports.require("time_limit", "--time-limit")
    if spec.workdir is None and supports.submitter_context:
        spec = dataclasses.replace(spec, workdir=working_directory())
    # -x NAME passes the submitter's value of NAME (the whole environment, not just the part a
    # job keeps), captured now: a queued job may start from another process much later.
    if spec.submit_env is not None:
        environ = spec.submit_env
    elif environ is None:
        environ = dict(os.environ)
    if spec.submit_env is None and supports.submitter_context:
        spec = dataclasses.replace(spec, submit_env=submit_env(dict(environ)))
    spec, line, notes = prepare_spec(spec, environ)
    return Submission(spec, line, tuple(notes))


def working_directory() -> str:
    try:
        return os.getcwd()
    except FileNotFoundError:
        raise UsageError("the current working directory was deleted", "cd to an existing folder and retry") from None


def refuse_unresolvable(decision: Decision, supports: Support) -> None:
    """A gang that can never fit this cluster (not "not now": never) is refused at submit, in
    the same words on every engine."""
    from ringleader.scheduler import Code

    if decision.code is Code.UNRESOLVABLE:
        raise UnschedulableError(
            f"job {decision.job.name} can never run on this cluster: {'; '.join(decision.reasons)}",
            f"ask for fewer GPUs per worker or fewer workers, or {supports.more_room}",
        )
