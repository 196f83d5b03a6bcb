"""ringleader's record of each job it ran on Slurm: ``<home>/slurm/jobs/<name>.json`` (0600),
written whole and atomically. Slurm forgets finished jobs (MinJobAge); the record keeps the
spec, the placement decision, the Slurm job id and the last state seen.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# How many measured restarts are kept: more than the window that prices the next (move.RESTART_WINDOW).
RESTARTS_KEPT = 100


def private_dir(path: Path) -> Path:
    """``path`` and every folder made on the way, 0700 whatever the umask."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    for made in missing:
        os.chmod(made, 0o700)
    return path


def write_private(path: Path, text: str, mode: int = 0o600) -> None:
    """Atomically, readable by the owner only."""
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


class Records:
    def __init__(self, root: Path) -> None:
        self.root = root  # <home>/slurm
        self._held = False  # this process holds the lock (one engine per thread)

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    def run_dir(self, name: str) -> Path:
        return self.root / "run" / name

    def path(self, name: str) -> Path:
        return self.jobs_dir / f"{name}.json"

    def load(self, name: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path(name).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def all(self) -> list[dict[str, Any]]:
        """Every record, in submission order."""
        if not self.jobs_dir.is_dir():
            return []
        found = [self.load(p.stem) for p in self.jobs_dir.glob("*.json")]
        return sorted((r for r in found if r), key=lambda r: (r["created_at"], r["name"]))

    def save(self, record: dict[str, Any]) -> None:
        private_dir(self.jobs_dir)
        write_private(self.path(record["name"]), json.dumps(record))

    def remove(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)

    def add_restart(self, job: str, started_at: float, resumed_at: float) -> None:
        """Record that ``job``'s run that Slurm started at ``started_at`` after a requeue had its
        program write its first line at ``resumed_at``: once per run, the last ``RESTARTS_KEPT``
        kept (``<root>/restarts.json``; deleting a job keeps what its restarts took). Called
        under ``locked``."""
        kept = [r for r in self._restarts() if (r[0], r[1]) != (job, started_at)]
        kept.append([job, started_at, resumed_at])
        private_dir(self.root)
        write_private(self.root / "restarts.json", json.dumps(kept[-RESTARTS_KEPT:]))

    def recent_restarts(self, limit: int) -> list[float]:
        """The seconds the ``limit`` most recently recorded restarts took, oldest first (never
        below 0: a rank's log lines are stamped by the clock of the node that wrote them)."""
        return [max(float(resumed) - float(started), 0.0) for _, started, resumed in self._restarts()[-limit:]]

    def _restarts(self) -> list[list[Any]]:
        try:
            data = json.loads((self.root / "restarts.json").read_text())
        except (OSError, ValueError):
            return []
        return [r for r in data if isinstance(r, list) and len(r) == 3] if isinstance(data, list) else []

    @contextmanager
    def locked(self) -> Iterator[None]:
        """One scheduling pass at a time per home (submit, the watcher, reads that refresh).
        Taken again inside itself (a pass that refreshes a record), it is already held."""
        if self._held:
            yield
            return
        private_dir(self.root)
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._held = True
            yield
        finally:
            self._held = False
            os.close(fd)


def add_event(record: dict[str, Any], kind: str, message: str) -> None:
    record.setdefault("events", []).append([time.time(), kind, message])
