"""Fencing a rank on an ssh host: the lease its wrapper holds from the head (time injected), the
bound the head records, the supervisor's wait for that bound (a manual clock), and the wrapper
stopping its program and everything it started once the lease lapses (real processes)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest

from ringleader.clock import ManualClock
from ringleader.engines.embedded.supervisor import GONE, Supervisor
from ringleader.runtime.demux import LEASE_RECORD
from ringleader.runtime.plan import RANK_FILE, lease_path
from ringleader.runtime.procs import alive
from ringleader.runtime.rank import FENCE_MARGIN_S, FENCED_EXIT, LEASE_S, Lease, fence_bound


def test_a_lease_runs_from_each_renewal_and_lapses_after_its_length() -> None:
    lease = Lease(10.0)
    assert not lease.granted and not lease.lapsed(1e9)  # before the first renewal: nothing to lapse
    assert lease.renew(b"L100.0", received=5.0)  # the head's clock reads 100 when ours reads 5
    assert lease.granted and lease.expires() == 15.0
    assert lease.renew(b"L104.0", received=9.0)
    assert not lease.lapsed(18.9) and lease.lapsed(19.0)


def test_a_renewal_held_back_by_a_cut_link_extends_nothing() -> None:
    # Sent at head time 104, delivered 60 s late (TCP retransmits once the link is back): the
    # lease still ends 10 s after it was sent, not 10 s after it came.
    lease = Lease(10.0)
    lease.renew(b"L100.0", received=5.0)
    lease.renew(b"L104.0", received=69.0)
    assert lease.expires() == 19.0 and lease.lapsed(69.0)


def test_the_quickest_delivery_seen_sets_the_clock_offset() -> None:
    lease = Lease(10.0)
    lease.renew(b"L100.0", received=7.0)  # the first one took 2 s (ssh, start-up)
    lease.renew(b"L101.0", received=6.0)  # this one came at once: the offset is 95, not 93
    assert lease.expires() == 16.0
    lease.renew(b"L100.5", received=6.5)  # out of order: the latest sending time counts
    assert lease.expires() == 16.0


@pytest.mark.parametrize("line", [b"", b"H", b"L", b"Lnan", b"Linf", b"L-inf", b"Lten", b"X100.0", b"L1e999"])
def test_anything_but_a_renewal_changes_nothing(line: bytes) -> None:
    lease = Lease(10.0)
    lease.renew(b"L100.0", received=5.0)
    assert not lease.renew(line, received=50.0)
    assert lease.expires() == 15.0


def test_the_head_records_a_bound_of_lease_grace_and_margin_in_a_record_of_fixed_size() -> None:
    assert fence_bound(1000.0, grace_s=2.0) == 1000.0 + LEASE_S + 2.0 + FENCE_MARGIN_S
    records = [LEASE_RECORD.format(renewed_at=t, fenced_at=fence_bound(t, 5.0)) for t in (0.0, 1.5, 1.8e9)]
    assert len({len(r) for r in records}) == 1  # rewritten over the last one's bytes: never a tail left over
    assert json.loads(records[2]) == {"renewed_at": 1.8e9, "fenced_at": 1.8e9 + LEASE_S + 5.0 + FENCE_MARGIN_S}


def fencing(tmp_path: Path, states: list[dict[str, object]], clock: ManualClock, stop: float | None = None):
    """What ``Supervisor._await_fence`` reads, with rank states as given; each pause moves the
    clock by a quarter second."""
    home, job = tmp_path, "train"
    lease_path(home, job).parent.mkdir(parents=True, exist_ok=True)
    watched = []
    for i, state in enumerate(states):
        path = home / "run" / job / f"{job}-worker-{i}.json"
        path.write_text(json.dumps(state))
        watched.append(SimpleNamespace(state_file=path))
    events: list[tuple[str, str]] = []
    sup = SimpleNamespace(home=home, job=job, watched=watched, clock=clock, grace_s=2.0,
                          persist=lambda event=None: events.append(event) or True,
                          pause=lambda: clock.advance(0.25), stop_request=lambda: stop)  # fmt: skip
    sup._fenced_at = partial(Supervisor._fenced_at, sup)
    return sup, events


CUT_OFF = {"remote": True, "host": "node-b", "lost": "host node-b lost: silent for 10 s"}
ENDED = {"remote": True, "host": "node-a", "exit_code": 0}


def test_the_supervisor_waits_until_the_recorded_bound_before_the_end_is_recorded(tmp_path: Path) -> None:
    clock = ManualClock(1000.0)
    sup, events = fencing(tmp_path, [ENDED, CUT_OFF], clock)
    lease_path(tmp_path, "train").write_text(LEASE_RECORD.format(renewed_at=990.0, fenced_at=fence_bound(990.0, 2.0)))
    Supervisor._await_fence(sup)
    assert clock.now() == fence_bound(990.0, 2.0)  # not a pause earlier
    [(kind, said)] = events
    assert kind == "Fencing" and "node-b" in said and "node-a" not in said, said


def test_no_wait_when_every_end_is_known_or_no_lease_was_ever_renewed(tmp_path: Path) -> None:
    clock = ManualClock(1000.0)
    sup, events = fencing(tmp_path, [ENDED, ENDED], clock)
    lease_path(tmp_path, "train").write_text(LEASE_RECORD.format(renewed_at=999.0, fenced_at=fence_bound(999.0, 2)))
    Supervisor._await_fence(sup)
    sup, events = fencing(tmp_path / "never", [CUT_OFF], clock)  # no renewal sent: no program started
    Supervisor._await_fence(sup)
    assert clock.now() == 1000.0 and events == []


def test_an_unreadable_record_waits_the_whole_bound_from_now(tmp_path: Path) -> None:
    clock = ManualClock(1000.0)
    sup, _ = fencing(tmp_path, [CUT_OFF], clock)
    lease_path(tmp_path, "train").write_text('{"renewed_at": 99')
    Supervisor._await_fence(sup)
    assert clock.now() == fence_bound(1000.0, 2.0)


def test_a_delete_ends_the_wait_but_a_preemption_waits_it_out(tmp_path: Path) -> None:
    clock = ManualClock(1000.0)
    sup, _ = fencing(tmp_path, [CUT_OFF], clock, stop=GONE)
    lease_path(tmp_path, "train").write_text(LEASE_RECORD.format(renewed_at=999.0, fenced_at=fence_bound(999.0, 2)))
    Supervisor._await_fence(sup)
    assert clock.now() == 1000.0
    Supervisor._await_fence(sup, stoppable=False)
    assert clock.now() == fence_bound(999.0, 2.0)


# A program that takes SIGTERM and trains on regardless, beside a child that left its process
# group: both must be gone once the wrapper stops it, and neither may write after that.
STUBBORN = """
import os, signal, subprocess, sys, time
folder = sys.argv[1]
signal.signal(signal.SIGTERM, lambda s, f: open(os.path.join(folder, "term"), "w").close())
escaped = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(0.05)"], start_new_session=True)
open(os.path.join(folder, "pids"), "w").write(f"{os.getpid()} {escaped.pid}")
while True:
    with open(os.path.join(folder, "progress"), "a") as fh:
        fh.write("x")
    time.sleep(0.05)
"""


def stream_wrapper(tmp_path: Path, start_s: float = 30.0) -> subprocess.Popen[bytes]:
    (tmp_path / "program.py").write_text(STUBBORN)
    rank = {"rank": 0, "instance": "j-worker-0", "node": "node-b", "gpus": [0], "node_gpus": [0], "local_rank": 0,
            "local_world_size": 1, "node_rank": 0, "emulated": True}  # fmt: skip
    table = {"job": "j", "world_size": 1, "nnodes": 1, "master_addr": "node-b", "master_port": 29500, "ranks": [rank],
             "lease_s": 1.0, "start_s": start_s, "grace_s": 0.5}  # fmt: skip
    argv = [sys.executable, "-S", RANK_FILE, "--stream", json.dumps(table), "--", sys.executable,
            str(tmp_path / "program.py"), str(tmp_path)]  # fmt: skip
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_a_rank_whose_lease_lapses_stops_its_program_and_all_it_started(tmp_path: Path) -> None:
    wrapper = stream_wrapper(tmp_path)
    assert wrapper.stdin is not None
    renewed = 0
    while not (tmp_path / "progress").exists() or renewed < 5:  # the program runs while the head renews
        wrapper.stdin.write(f"L{time.monotonic():.6f}\n".encode())
        wrapper.stdin.flush()
        renewed += 1
        time.sleep(0.2)
    assert wrapper.poll() is None  # renewed in time: it runs on
    assert wrapper.stdout is not None
    output = wrapper.stdout.read()  # no more renewals, and stdin stays open: silence, not EOF
    assert wrapper.wait(timeout=60) == FENCED_EXIT, output
    assert b"Oringleader: no word from the head for 1 s: stopping the rank" in output
    assert (tmp_path / "term").exists()  # SIGTERM first, as every stop; SIGKILL after the grace
    program, escaped = map(int, (tmp_path / "pids").read_text().split())
    # Gone with the wrapper (at most zombies): nothing of the rank can write any more.
    assert not alive(program, None) and not alive(escaped, None)
    wrapper.stdin.close()


def test_a_rank_that_gets_no_lease_never_starts_its_program(tmp_path: Path) -> None:
    wrapper = stream_wrapper(tmp_path, start_s=0.5)
    output, _ = wrapper.communicate(timeout=60)
    assert wrapper.returncode == FENCED_EXIT
    assert b"no lease from the head within 0.5 s: the program was not started" in output
    assert not (tmp_path / "pids").exists()
