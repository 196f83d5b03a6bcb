"""What the Slurm engine keeps beside its job records for team queues and restarts (the rules are
``scheduler/teams.py``'s and ``jobs/failures.py``'s), as JSON files under ``<home>/slurm``:

    queues.json   the queues: quota, weight, cohort
    usage.json    GPU-seconds of the runs of deleted jobs, per queue, so that a delete does not
                  give a queue its fair share back (the records of jobs still known hold theirs)
    faults.json   the faults blamed on each node, and the nodes ringleader cordoned, with why

Each is written whole (0600) while ``teams.lock`` is held; that lock is taken inside the
records' lock or without it, never the other way round.
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
from ringleader.jobs.queues import queue_from_dict, queue_to_dict
from ringleader.jobs.spec import JobSpec
from ringleader.scheduler.teams import TeamQueue, decayed, queue_of, run_usage

QUEUES, USAGE, FAULTS = "queues.json", "usage.json", "faults.json"


def record_usage(record: Mapping[str, Any], now: float) -> float:
    """A job record's GPU-seconds, each run decayed to ``now``: its ended runs (``runs``) and the
    one it is in (from ``started_at`` to its end, or to now while it runs)."""
    spec = JobSpec.from_dict(record["spec"])
    gpus = spec.workers * spec.gpus_per_worker
    runs = [tuple(r) for r in record.get("runs", [])]
    if record.get("started_at"):
        runs.append((record["started_at"], record.get("ended_at") or now))
    return sum(run_usage(gpus, float(start), float(end), now) for start, end in runs)


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

    # -- queues -------------------------------------------------------------------------------
    def queues(self) -> list[TeamQueue]:
        """The queues kept, in the order they were first created."""
        return [queue_from_dict(name, kept) for name, kept in self._read(QUEUES).items()]

    def put_queue(self, queue: TeamQueue) -> None:
        kept = self._read(QUEUES)
        kept[queue.name] = queue_to_dict(queue)
        self._write(QUEUES, kept)

    def delete_queue(self, name: str) -> None:
        kept = self._read(QUEUES)
        kept.pop(name, None)
        self._write(QUEUES, kept)
        usage = self._read(USAGE)
        if usage.pop(name, None) is not None:
            self._write(USAGE, usage)

    # -- usage of forgotten jobs ----------------------------------------------------------------
    def forgotten_usage(self, now: float) -> dict[str, float]:
        """Queue -> the decayed GPU-seconds of its deleted jobs' runs."""
        return {q: decayed(float(gpu_s), float(as_of), now) for q, (gpu_s, as_of) in self._read(USAGE).items()}

    def forget(self, record: Mapping[str, Any], now: float) -> None:
        """A deleted job's runs, kept in its queue's usage (only once a queue exists)."""
        if not self._read(QUEUES) or not (record.get("runs") or record.get("started_at")):
            return
        queue = queue_of(JobSpec.from_dict(record["spec"]))
        usage = self._read(USAGE)
        before = decayed(float(usage[queue][0]), float(usage[queue][1]), now) if queue in usage else 0.0
        usage[queue] = [before + record_usage(record, now), now]
        self._write(USAGE, usage)

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
