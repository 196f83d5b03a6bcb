"""A failed job as its user meets it: `logs` leads with the failing rank's last lines (an mpirun
launcher often said nothing), a missing script is refused at submit rather than in every rank's
log, and an mpirun job whose ranks have all ended is over at once, not a grace later."""

from __future__ import annotations

import sys

from ringleader.engines.embedded.engine import Runtime

PY = sys.executable
# Rank 1 fails while rank 0 still trains; rank 0 ends on the SIGTERM its sibling's failure brings.
FAILS_ON_RANK_1 = ("import os, sys, time; r = int(os.environ['OMPI_COMM_WORLD_RANK']); print('rank', r, 'says why', "
                   "flush=True); time.sleep(0.5) if r == 1 else time.sleep(3600); sys.exit(3)")  # fmt: skip


def test_logs_of_a_failed_job_lead_with_the_failing_rank(cli) -> None:  # type: ignore[no-untyped-def]
    # An hour's grace: a job that sat it out (or waited for rank 0's hour of sleep) would not
    # have ended by the wait's deadline; ending at all says it was over once its ranks were.
    cli.env["RINGLEADER_GRACE_S"] = "3600"
    cli.ok("submit", "mpi", "--name", "lr", "--workers", "2", "--", "mpirun", "-np", "2", PY, "-c", FAILS_ON_RANK_1)
    view = Runtime.open(cli.home).wait("lr", 300)
    assert view.status.value == "FAILED" and "root cause: lr-worker-1 failed (exit code 3)" in (view.reason or "")
    out = cli("logs", "lr")
    assert out.returncode == 0
    assert out.stdout.startswith("rank 1 says why\n")  # the failing rank first
    assert out.stderr.splitlines() == [
        "==> lr failed at lr-worker-1 (exit code 3); its last 20 lines (all of them: `ringleader logs lr -i "
        "lr-worker-1`):", "==> lr-launcher, the chief:"]  # fmt: skip
    assert cli.ok("logs", "lr", "-i", "lr-launcher") in out.stdout  # then the chief's log, whole
    assert cli("logs", "lr", "-i", "lr-worker-0").stderr == ""  # asked for one instance: that one alone


def test_a_missing_script_is_refused_at_submit_not_in_every_ranks_log(cli) -> None:  # type: ignore[no-untyped-def]
    for line in (["python3", "nosuchfile.py"], ["mpirun", "-np", "2", "python3", "-u", "nosuchfile.py"],
                 ["torchrun", "--nproc-per-node", "2", "nosuchfile.py"]):  # fmt: skip
        out = cli("submit", "mpi", "--name", "ns", "--workers", "2", "--", *line)
        assert out.returncode == 2 and out.stderr.startswith("error: script 'nosuchfile.py' does not exist in "), line
    assert cli.ok("submit", "mpi", "--name", "plan", "--workers", "2", "--dry-run", "--", "python3", "later.py")
    assert "plan" not in cli.ok("list")  # a plan may name the script it will have
