"""What the Slurm engine keeps beside its job records for restarts (the rules are
``jobs/failures.py``'s), as JSON under ``<home>/slurm`` (the team queues are Slurm's own accounts
and QOS, ``accounts.py``):

    faults.json   the faults blamed on each node, and the nodes ringleader cordoned, with why

Written whole (0600) while ``teams.lock`` is held; that lock is taken inside the records' lock
or without it, never the other way round.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ringleader.engines.slurm.records import private_dir, write_private

FAULTS = "faults.json"


class TeamFiles:
    def __init__(self, root: Path) -> None:
        self.root = root  # <home>/slurm

    @contextmanager
    def locked(self) -> Iterator[None]:
        private_dir(self.root)
        fd = os.open(self.root / "teams.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read(self, name: str) -> dict[str, Any]:
        try:
            data = json.loads((self.root / name).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, name: str, data: Mapping[str, Any]) -> None:
        private_dir(self.root)
        write_private(self.root / name, json.dumps(data))

    # -- faults and cordons ---------------------------------------------------------------------
    def blame(self, node: str, job: str, run: int, why: str, now: float) -> list[tuple[str, str]]:
        """A fault of ``job``'s run ``run`` blamed on ``node`` (the same run blamed twice counts
        once); every distinct failure the node is now blamed for, as (job, why)."""
        faults = self._read(FAULTS)
        blamed = faults.setdefault("faults", {}).setdefault(node, {})
        blamed.setdefault(f"{job}#{run}", [why, now])
        self._write(FAULTS, faults)
        return [(key.rpartition("#")[0], str(said[0])) for key, said in blamed.items()]

    def cordons(self) -> dict[str, str]:
        """Node -> why ringleader cordoned it."""
        return {node: str(why) for node, why in self._read(FAULTS).get("cordons", {}).items()}

    def cordon(self, node: str, reason: str) -> None:
        faults = self._read(FAULTS)
        faults.setdefault("cordons", {})[node] = reason
        self._write(FAULTS, faults)

    def uncordon(self, node: str) -> bool:
        """End ringleader's cordon of ``node`` and forget its faults; False when it had none."""
        faults = self._read(FAULTS)
        had = faults.get("cordons", {}).pop(node, None) is not None
        faults.get("faults", {}).pop(node, None)
        self._write(FAULTS, faults)
        return had
