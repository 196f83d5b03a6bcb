"""Reading jobs through the CLI in tests: `get -o json`, waiting for a status, a job's events."""

from __future__ import annotations

import json
import time
from typing import Any

Cli = Any  # the `cli` / `seeds_cli` fixtures of tests/cli/conftest.py


def job(cli: Cli, name: str) -> dict[str, Any]:
    return json.loads(cli.ok("get", name, "-o", "json"))  # type: ignore[no-any-return]


def wait_for(cli: Cli, name: str, *statuses: str, seconds: float = 60) -> dict[str, Any]:
    """The job once its status is one of ``statuses`` (fails after ``seconds``)."""
    deadline = time.monotonic() + seconds
    while (data := job(cli, name))["status"] not in statuses and time.monotonic() < deadline:
        time.sleep(0.3)
    assert data["status"] in statuses, data
    return data


def events(data: dict[str, Any], kind: str) -> list[str]:
    """The messages of the events of ``kind`` in a job's `get -o json`."""
    return [e["message"] for e in data["events"] if e["kind"] == kind]
