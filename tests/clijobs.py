"""Reading jobs through the CLI in tests: `get -o json`, waiting for a status, a job's events."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import waiting
from ringleader.engines.embedded.engine import Runtime
from ringleader.jobs.views import JobView

Cli = Any  # the `cli` / `seeds_cli` fixtures of tests/cli/conftest.py


def job(cli: Cli, name: str) -> dict[str, Any]:
    return json.loads(cli.ok("get", name, "-o", "json"))  # type: ignore[no-any-return]


def wait_for(cli: Cli, name: str, *statuses: str, seconds: float = waiting.WAIT_S) -> dict[str, Any]:
    """The job as `get -o json` shows it once its status is one of ``statuses`` (fails after
    ``seconds``, saying the last status seen). The wait reads the state in this process: a
    `ringleader` start per poll would burn a CPU while nothing changes; what the command says is
    read once the state shows the status."""
    seen: dict[str, Any] = {}

    def reached() -> dict[str, Any] | None:
        with Runtime.open(cli.home, readonly=True) as rt:
            seen["status"] = rt.get(name).status.value
        if seen["status"] not in statuses:
            return None
        seen.update(job(cli, name))  # the command's view: it may have moved on since
        return dict(seen) if seen["status"] in statuses else None

    return waiting.wait_for(reached, seconds, lambda: f"job {name} to be {' or '.join(statuses)}, last seen: {seen}",
                            every=0.3)  # fmt: skip


def wait_until(cli: Cli, name: str, check: Callable[[JobView], bool], what: str | Callable[[], str]) -> dict[str, Any]:
    """The job as `get -o json` shows it once ``check`` holds for it, polled in this process as
    ``wait_for`` polls."""

    def holds() -> bool:
        with Runtime.open(cli.home, readonly=True) as rt:
            return check(rt.get(name))

    waiting.wait_for(holds, waiting.WAIT_S, what, every=0.3)
    return job(cli, name)


def events(data: dict[str, Any], kind: str) -> list[str]:
    """The messages of the events of ``kind`` in a job's `get -o json`."""
    return [e["message"] for e in data["events"] if e["kind"] == kind]
