"""The head's side of a job on ssh hosts: mpirun's tagged output, split back into ranks.

    python -m ringleader.runtime.demux PLAN --launcher -- MPIRUN ...

runs the rank wrapper's launcher (``rank.main``) with this module's relay of mpirun's output.

mpirun runs with ``--tag-output``, so every line a rank prints reaches the head as
``[JOB,RANK]<stdout>:PAYLOAD``; the remote rank wrapper (``rank.py --stream``) prefixes its
program's lines with ``O``, its state with ``S`` and heartbeats with ``H``. Here each rank gets its
log (timestamped, as on this host) and a state file the supervisor reads like a local one, except
that it holds no local pid: a remote pid must never be signalled here.

A host that goes silent (no line, no heartbeat) for HOST_SILENCE_S while it still has running ranks
is cut off: its ranks are recorded as lost, naming the host, and mpirun is stopped, so the job
fails in bounded time instead of hanging in a collective. mpirun's own "lost communication with
a remote daemon ... on node X" message does the same at once.

The other way, it renews every rank's lease (``rank.Lease``) on mpirun's stdin every RENEW_S,
until mpirun's output ends or a host is lost: from then on the gang is going down, and a rank that
is cut off from the head stops itself once its lease lapses. Before each renewal it records, in
the plan's ``lease_file``, when the last rank it may reach stops writing (``rank.fence_bound``):
the supervisor restarts the gang, or frees its GPUs, only after that.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from ringleader.runtime.rank import (
    HEARTBEAT_S,
    RENEW_S,
    STREAM_HEARTBEAT,
    STREAM_OUTPUT,
    STREAM_RENEWAL,
    STREAM_STATE,
    fence_bound,
    main,
    stamp,
)

# Longer than a heartbeat period plus ssh's own keepalive budget (see hosts.ssh).
HOST_SILENCE_S = 5 * HEARTBEAT_S
HOST_START_S = 60.0  # before a host's first line: ssh connect + interpreter start-up
_TAG = re.compile(rb"^\[\d+,(\d+)\]<(?:stdout|stderr)>:(.*)$", re.DOTALL)
# mpirun tags each chunk it reads from a rank, not each line: a line split between two reads
# arrives as "[1,0]<stdout>:first half[1,0]<stdout>:second half" (possibly with another rank's
# chunks between the halves), so tags inside a line start new chunks.
_ANY_TAG = re.compile(rb"\[\d+,\d+\]<(?:stdout|stderr)>:")
_LOST_DAEMON = re.compile(rb"Remote daemon:\s*\S+ on node (\S+)")
# The lease file's one record, always as long (wall-clock seconds; see Demux._record_renewal).
LEASE_RECORD = '{{"renewed_at": {renewed_at:20.6f}, "fenced_at": {fenced_at:20.6f}}}\n'


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(data))
    os.replace(tmp, path)


class _Rank:
    def __init__(self, entry: dict[str, Any]) -> None:
        self.entry = entry
        self.node: str = entry["node"]
        self.state_file = Path(entry["state"])
        self.state: dict[str, Any] = {"remote": True, "host": self.node, "instance": entry["instance"]}
        fd = os.open(entry["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.log = os.fdopen(fd, "ab")

    @property
    def over(self) -> bool:
        return "exit_code" in self.state or "lost" in self.state

    def record(self, update: dict[str, Any]) -> None:
        self.state.update(update)
        _write_json(self.state_file, self.state)


class Demux:
    """Reads mpirun's stdout (``run``) and watches for silent hosts (a thread of its own)."""

    def __init__(self, plan: dict[str, Any], launcher_log: BinaryIO, mpirun: subprocess.Popen[bytes]) -> None:
        self.log, self.mpirun = launcher_log, mpirun
        Path(plan["ranks"][0]["state"]).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        Path(plan["ranks"][0]["log"]).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.ranks = [_Rank(e) for e in plan["ranks"]]
        self.lock = threading.Lock()
        started = time.monotonic()
        self.heard: dict[str, float] = {}
        self.deadline = {r.node: started + HOST_START_S for r in self.ranks}
        self.finished = threading.Event()
        self.partial: dict[bytes, bytes] = {}  # tag -> the start of a line split between chunks
        self.grace_s = float(plan["grace_s"])
        self.lease_fd: int | None = None
        with contextlib.suppress(OSError):  # unrecorded, no lease is renewed: no rank starts its program
            self.lease_fd = os.open(plan["lease_file"], os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        self.renewing = True  # until mpirun's output ends or a host is lost

    def run(self, src: BinaryIO) -> None:
        for loop in (self._watch, self._renew):
            threading.Thread(target=loop, daemon=True).start()
        try:
            for line in iter(src.readline, b""):
                for whole in self._joined(line.rstrip(b"\n")):
                    self._line(whole)
        finally:
            self.finished.set()
            for r in self.ranks:
                r.log.close()
            with self.lock:
                if self.lease_fd is not None:
                    os.close(self.lease_fd)
                    self.lease_fd = None

    def _joined(self, line: bytes) -> list[bytes]:
        """The complete tagged lines in one line of mpirun's output: chunks that a later tag
        interrupts are kept until the rest of their line comes."""
        starts = [m.start() for m in _ANY_TAG.finditer(line)]
        if not starts or starts[0] != 0:
            return [line]
        done = []
        for start, end in zip(starts, [*starts[1:], len(line)], strict=True):
            chunk = line[start:end]
            tag = _ANY_TAG.match(chunk)
            assert tag is not None
            key, body = tag.group(0), self.partial.pop(tag.group(0), b"") + chunk[tag.end() :]
            if end == len(line):
                done.append(key + body)
            else:
                self.partial[key] = body
        return done

    def _line(self, line: bytes) -> None:
        m = _TAG.match(line)
        if m is None or int(m.group(1)) >= len(self.ranks):
            self._launcher_line(line)
            return
        rank, payload = self.ranks[int(m.group(1))], m.group(2)
        with self.lock:
            self.heard[rank.node] = time.monotonic()
            kind, body = payload[:1], payload[1:]
            if kind == STREAM_OUTPUT:
                # As plain mpirun: the launcher's log shows every rank's lines too.
                for log in (rank.log, self.log):
                    log.write(stamp() + body + b"\n")
                    log.flush()
            elif kind == STREAM_STATE:
                data = json.loads(body)
                update = {"remote_pid": data.get("pid"), "remote_host": data.get("host"),
                          "started_at": data.get("started_at")}  # fmt: skip
                for key in ("exit_code", "ended_at", "signal"):
                    if key in data:
                        update[key] = data[key]
                if not rank.over:
                    rank.record(update)
            elif kind != STREAM_HEARTBEAT:
                # Not from our wrapper (e.g. the remote interpreter failed before it ran): keep it.
                rank.log.write(stamp() + payload + b"\n")
                rank.log.flush()

    def _launcher_line(self, line: bytes) -> None:
        self.log.write(stamp() + line + b"\n")
        self.log.flush()
        m = _LOST_DAEMON.search(line)
        if m is not None:
            node = m.group(1).decode(errors="replace")
            self._lose(node, f"host {node} lost: mpirun lost communication with its daemon (down or cut off)")

    def _renew(self) -> None:
        """Every rank's lease renewed every RENEW_S, each renewal recorded before it is sent: the
        recorded bound is never earlier than the last one a rank may get."""
        stdin = self.mpirun.stdin
        while stdin is not None and not self.finished.is_set():
            with self.lock:
                if not self.renewing:
                    return
                sent_at, sent = time.time(), time.monotonic()
                if not self._record_renewal(sent_at):
                    return
            try:
                stdin.write(STREAM_RENEWAL + f"{sent:.6f}\n".encode())
                stdin.flush()
            except OSError:  # mpirun is gone: no renewal reaches any rank now
                return
            self.finished.wait(RENEW_S)

    def _record_renewal(self, sent_at: float) -> bool:
        """The renewal about to be sent, in the lease file: a record of fixed size rewritten over
        the last one's bytes, so a full disk cannot stop it (False: it could not be written, and
        the renewal must not be sent)."""
        record = LEASE_RECORD.format(renewed_at=sent_at, fenced_at=fence_bound(sent_at, self.grace_s))
        if self.lease_fd is None:
            return False
        try:
            return os.pwrite(self.lease_fd, record.encode(), 0) == len(record)
        except OSError:
            return False

    def _lose(self, node: str, why: str) -> bool:
        """Record the node's unfinished ranks as lost, and renew no lease from now on; True if
        there were any."""
        with self.lock:
            victims = [r for r in self.ranks if r.node == node and not r.over]
            self.renewing = self.renewing and not victims
            now = time.time()
            for r in victims:
                r.record({"lost": why, "ended_at": now})
        return bool(victims)

    def _watch(self) -> None:
        while not self.finished.wait(HEARTBEAT_S / 2):
            now = time.monotonic()
            for node in sorted({r.node for r in self.ranks}):
                heard = self.heard.get(node)
                limit = heard + HOST_SILENCE_S if heard is not None else self.deadline[node]
                if now <= limit:
                    continue
                silent = now - (heard if heard is not None else now - HOST_START_S)
                if self._lose(node, f"host {node} lost: silent for {silent:.0f} s (down or cut off)"):
                    self.log.write(stamp() + f"ringleader: host {node} silent, stopping mpirun\n".encode())
                    self.log.flush()
                    self.mpirun.send_signal(signal.SIGTERM)


def relay(plan: dict[str, Any], launcher_log: BinaryIO, mpirun: subprocess.Popen[bytes]) -> Callable[[BinaryIO], None]:
    """The launcher's pump over mpirun's stdout (see ``rank.main``)."""
    return Demux(plan, launcher_log, mpirun).run


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], relay=relay))
