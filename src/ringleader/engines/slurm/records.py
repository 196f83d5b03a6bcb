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
