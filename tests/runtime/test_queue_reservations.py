"""A big gang is never starved on the embedded engine: it gets a reservation that `get` shows,
small jobs backfill only when their time limit ends before it, and it starts no later than the
reservation said."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import Runtime
from ringleader.jobs.states import JobStatus


@pytest.mark.slow
def test_big_gang_gets_a_reservation_and_small_jobs_backfill_only_where_they_do_not_delay_it(
    small: Runtime, h, tmp_path: Path
) -> None:
    # One 4-GPU node: a 2-GPU job with a 60 s limit runs; a 4-GPU gang of higher priority waits.
    small.submit(h.spec("holder", h.py(h.waiting_rank(tmp_path / "holder-done")), workers=2, time_limit_s=60))
    small.submit(h.spec("big", h.py("print('big ran')"), workers=4, priority=10))
    big = small.get("big")
    assert big.status is JobStatus.PENDING
    reservation = (big.placement or {})["reservation"]
    holder = small.get("holder")
    assert holder.started_at is not None
    assert reservation["start_s"] == pytest.approx(holder.started_at + 60 + 2)  # its limit, then the grace
    assert big.reason is not None
    assert re.match(r"reserved GPUs 0-3 on box, expected start in ~(5\d|6[0-2]) s", big.reason), big.reason

    # Two GPUs are free. A small job without a limit could hold them past the reservation: it waits.
    small.submit(h.spec("unlimited", h.py("print('unlimited ran')"), workers=1))
    unlimited = small.get("unlimited")
    assert unlimited.status is JobStatus.PENDING
    assert unlimited.reason is not None and "waits for reservation of job big: it has no time limit" in unlimited.reason
    # One whose limit ends before the reservation starts backfills now, on a reserved GPU.
    small.submit(h.spec("backfill", h.py(h.waiting_rank(tmp_path / "backfill-done")), workers=1, time_limit_s=20))
    assert small.get("backfill").status is JobStatus.RUNNING

    env = {**os.environ, "RINGLEADER_HOME": str(small.home)}
    shown = subprocess.run([sys.executable, "-m", "ringleader.cli.main", "get", "big"], env=env,
                           capture_output=True, text=True, timeout=60).stdout  # fmt: skip
    assert re.search(r"Reason:\s+reserved GPUs 0-3 on box, expected start in ~\d+ s", shown), shown

    (tmp_path / "backfill-done").touch()
    h.wait_for(lambda: small.get("backfill").status.is_terminal(), what="the backfilled job to end")
    assert small.get("unlimited").status is JobStatus.PENDING  # the reserved GPUs stay held
    (tmp_path / "holder-done").touch()  # ends early: the gang starts at once, before the small job
    h.wait_for(lambda: small.get("big").status is not JobStatus.PENDING, what="the gang to start")
    big = small.get("big")
    assert big.started_at is not None and big.started_at <= reservation["start_s"]
    unlimited = small.get("unlimited")
    assert unlimited.started_at is None or unlimited.started_at >= big.started_at
    h.wait_for(lambda: small.get("unlimited").status is JobStatus.SUCCEEDED, what="the small job to run after")
    assert small.get("big").status is JobStatus.SUCCEEDED
