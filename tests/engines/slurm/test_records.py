"""ringleader's Slurm job records under concurrent commands, without a Slurm cluster: a command
that read a record before another moved it on never writes its old view back."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ringleader.engines.slurm import SlurmEngine
from ringleader.jobs.spec import JobSpec


def record(slurm_id: str, **more: Any) -> dict[str, Any]:
    spec = JobSpec("train", 2, 1, ["python", "train.py"])
    return {"name": "train", "spec": spec.to_dict(), "created_at": time.time() - 60, "priority": 0,
            "status": "RUNNING", "reason": None, "plan": None, "slurm_id": slurm_id, "started_at": time.time() - 30,
            "ended_at": None, "events": [], **more}  # fmt: skip


def test_a_stale_view_of_a_requeued_job_does_not_undo_its_new_run(tmp_path: Path) -> None:
    """Another command requeued the preempted job and launched it again as Slurm job 2; this one
    still holds the record of Slurm job 1, which Slurm now reports ended. Requeuing from that
    view would forget job 2 (left running, and the job launched a third time)."""
    engine = SlurmEngine(tmp_path / "home")
    engine.records.save(record("2", restarts=1))
    stale = record("1", preempted_by="urgent")
    ended = [{"JobId": "1", "JobState": "CANCELLED", "ExitCode": "0:15", "Reason": "None",
              "StartTime": "2026-11-27T10:00:00", "EndTime": "2026-11-27T10:05:00"}]  # fmt: skip
    seen = engine._refresh(stale, ended)
    kept = engine.records.load("train")
    assert kept is not None and (kept["slurm_id"], kept["status"], kept["restarts"]) == ("2", "RUNNING", 1)
    assert seen["slurm_id"] == "2"


def test_a_fresh_view_of_a_preempted_job_requeues_it(tmp_path: Path) -> None:
    engine = SlurmEngine(tmp_path / "home")
    engine.records.save(record("1", preempted_by="urgent"))
    ended = [{"JobId": "1", "JobState": "CANCELLED", "ExitCode": "0:15", "Reason": "None",
              "StartTime": "2026-11-27T10:00:00", "EndTime": "2026-11-27T10:05:00"}]  # fmt: skip
    engine._refresh(engine.records.load("train") or {}, ended)
    kept = engine.records.load("train")
    assert kept is not None and (kept["slurm_id"], kept["status"], kept["restarts"]) == (None, "PENDING", 1)
    assert len(kept["runs"]) == 1  # the run it ended counts for its queue's fair share
