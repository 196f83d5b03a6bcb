"""One preparation of a submit, before any engine: every engine refuses, replaces and notes the
same things in the same words, because they all start from what this returns.

    sub = prepare_submit(spec, engine.supports)     # validate, record, read the line once
    sub.spec      the spec as it will run (the user's line translated, -x values captured)
    sub.line      its command, read once: what checks and launchers read
    sub.notes     what was replaced, for the user

Engines declare what they support (``Support``, as SkyPilot's provisioners do); a request for
something an engine does not support is refused here, in one line, before anything is created.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ringleader.errors import UsageError
from ringleader.jobs.commandline import CommandLine, prepare_spec
from ringleader.jobs.spec import JobSpec, submit_env


@dataclass(frozen=True)
class Support:
    """What an engine can do beyond submit/get/list/logs/delete (which every engine does)."""

    engine: str
    # Ranks start in the submitter's working directory with the search paths and settings of the
    # submitter's shell (this host, ssh hosts or Slurm nodes sharing its file system); not so for
    # pods, which start in their image.
    submitter_context: bool = True
    image: str | None = None  # how --image runs, or None: refused
    cluster_file: bool = False  # `cluster apply` / `cluster get`: the engine keeps a declared cluster
    node_labels: bool = False  # `node label`
    prune: bool = False  # `prune`: finished jobs are the engine's to forget
    emulated_cluster: bool = False  # `cluster up` / `cluster down`
    state_backup: bool = False  # `state export` / `state import`
    time_limit: bool = False  # `--time-limit`: the job is stopped at its limit

    def require(self, operation: str, what: str) -> None:
        """Refuse ``what`` (a command, or an option) in one line unless the engine supports it."""
        if not getattr(self, operation):
            raise UsageError(
                f"{what} is not supported by the {self.engine} engine",
                f"use the tool the {self.engine} cluster already has for it, or --engine embedded",
            )


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
