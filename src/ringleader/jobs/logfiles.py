"""Per-instance log files as every file-based engine keeps them (embedded, ssh hosts, Slurm): one
file per instance, each line prefixed with its RFC 3339 UTC time; which file an instance name
means, the last lines, following a log until its job ends, and when a program first wrote to it
since a time (a restarted run's)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from ringleader.errors import NotFoundError, RingleaderError, StateError
from ringleader.jobs.views import JobView


def instance_name(view: JobView, instance: str | None) -> str:
    """The instance a user means: the chief by default; `worker-0` as short for `JOB-worker-0`."""
    names = [i.name for i in view.instances]
    if instance is None:
        chief = next((i.name for i in view.instances if i.is_chief), None)
        if chief is None:
            raise NotFoundError(f"job {view.name} has no instances yet ({view.status.value})", "wait until it runs")
        return chief
    if instance in names:
        return instance
    short = f"{view.name}-{instance}"
    if short not in names:
        choices = ", ".join(names) or "(none yet)"
        raise NotFoundError(f"job {view.name} has no instance {instance!r}", f"use one of {choices}")
    return short


def strip_stamp(line: str) -> str:
    head, sep, rest = line.partition(" ")
    return rest if sep and head.endswith("Z") and head[:4].isdigit() else line


def _shown(text: str, timestamps: bool) -> str:
    return "".join(ln if timestamps else strip_stamp(ln) for ln in text.splitlines(keepends=True))


def read_log(path: Path, tail: int | None = None, timestamps: bool = False) -> str:
    """The log's lines (its last ``tail``), without their times unless ``timestamps``."""
    return _read_log(path, tail, timestamps)[0]


def _open_log(path: Path) -> BinaryIO:
    """A job's log for reading, never through a link in its place or in its job's folder's
    (the folders above are checked whenever the state is opened): one planted there would
    show the user another file. FileNotFoundError while it does not exist."""
    for step in (path.parent, path):
        if step.is_symlink():
            raise StateError(f"{step} is a symbolic link (ringleader never reads a log through one)",
                             f"remove the link (rm {step})")  # fmt: skip
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    return os.fdopen(fd, "rb")


def _read_log(path: Path, tail: int | None, timestamps: bool) -> tuple[str, int]:
    """The log's lines (its last ``tail``: read from the end, so the memory needed is that of
    the lines shown, not of the whole log) and the offset just past what was read."""
    try:
        fh = _open_log(path)
    except FileNotFoundError:
        return "", 0
    with fh:
        size = os.fstat(fh.fileno()).st_size
        start = 0 if tail is None else size if tail <= 0 else _start_of_last_lines(fh, size, tail)
        fh.seek(start)
        data = fh.read(size - start)
    return _shown(data.decode(errors="replace"), timestamps), start + len(data)


TAIL_BLOCK = 64 << 10


def _start_of_last_lines(fh: BinaryIO, size: int, lines: int) -> int:
    """Where the last ``lines`` lines of a file of ``size`` bytes start, reading backwards a
    block at a time. A last line without its newline is a line, as the rank wrapper may be
    writing it."""
    end = size
    if size:
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            end = size - 1  # the last line's own newline does not start another line
    pos, found = end, 0
    while pos > 0:
        step = min(TAIL_BLOCK, pos)
        fh.seek(pos - step)
        block = fh.read(step)
        cut = len(block)
        while (cut := block.rfind(b"\n", 0, cut)) >= 0:
            found += 1
            if found == lines:
                return pos - step + cut + 1
        pos -= step
    return 0


def follow_log(
    get: Callable[[], JobView], path_of: Callable[[], Path], tail: int | None, timestamps: bool, poll_s: float
) -> Iterator[str]:
    """The log so far, then new whole lines as they come, until the job ends (a job that has no
    instance yet is waited for)."""
    while not get().instances and not get().status.is_terminal():
        time.sleep(poll_s)
    path = path_of()
    first, offset = _read_log(path, tail, timestamps)  # followed from exactly where this read ended
    if first:
        yield first
    while True:
        done = get().status.is_terminal()
        if path.exists() and path.stat().st_size > offset:
            with _open_log(path) as fh:
                fh.seek(offset)
                chunk = fh.read()
            cut = len(chunk) if done else chunk.rfind(b"\n") + 1
            offset += cut
            yield _shown(chunk[:cut].decode(errors="replace"), timestamps)
        if done:
            return
        time.sleep(poll_s)


def stamp_seconds(line: str) -> float | None:
    """The time a log line was stamped with (RFC 3339, as these files and the kubelet write it),
    in seconds since the epoch; None for a line without one."""
    head = line.partition(" ")[0]
    if not (head.endswith("Z") and head[:4].isdigit()):
        return None
    try:
        return datetime.fromisoformat(head).timestamp()
    except ValueError:
        return None


# How the rank wrapper's own lines in a rank's log begin (rank.py, demux.py: a program that
# could not start, a lapsed lease, lines dropped on a full disk): they are not its program's.
WRAPPER_LINE = "ringleader: "


def first_program_line(path: Path, offset: int, since: float) -> tuple[float | None, int]:
    """When a rank's program first wrote to its log at or after ``since`` (seconds since the
    epoch): the stamp of the first whole line from ``offset`` on that is its program's (not the
    wrapper's own), and the offset past the lines read, to read on from there while it is None
    (a line still being written is read next time). Lines stamped before ``since`` are an
    earlier run's: a requeued job's runs append to the same file."""
    try:
        fh = _open_log(path)
    except FileNotFoundError:
        return None, offset
    with fh:
        fh.seek(offset)
        for line in fh:
            if not line.endswith(b"\n"):
                break
            offset += len(line)
            text = line.decode(errors="replace")
            at = stamp_seconds(text)
            if at is not None and at >= since and not strip_stamp(text).startswith(WRAPPER_LINE):
                return at, offset
    return None, offset


def first_rank_line(logs: Mapping[str, Path], read: dict[str, int], since: float) -> float | None:
    """When a run's program first wrote a line at or after ``since`` to any of its ranks' logs
    (instance -> path): after a requeue, when it ran again. Each log is read on from
    ``read[instance]``, which is updated (the next look reads only what was appended since); a
    log that cannot be read (a link in its place) is not its rank's to tell."""
    written = []
    for instance, path in logs.items():
        try:
            at, read[instance] = first_program_line(path, read.get(instance, 0), since)
        except (OSError, RingleaderError):
            continue
        if at is not None:
            written.append(at)
    return min(written, default=None)


def lines_since(
    chunks: Iterable[str], cutoff: float, timestamps: bool, tail: int | None = None
) -> Iterator[str]:  # fmt: skip
    """arena's `logs --since`: of ``chunks`` read with their stamps (whole lines each), the lines
    stamped at or after ``cutoff`` (a line without a stamp goes with the one before it), then
    ``tail`` of the first chunk's; stamps kept only with ``timestamps``."""
    keep = False
    for n, chunk in enumerate(chunks):
        kept = []
        for line in chunk.splitlines(keepends=True):
            at = stamp_seconds(line)
            keep = keep if at is None else at >= cutoff
            if keep:
                kept.append(line if timestamps else strip_stamp(line))
        if n == 0 and tail is not None:
            kept = kept[len(kept) - tail:] if tail else []
        if kept:
            yield "".join(kept)


def wait_until_ended(get: Callable[[], JobView], timeout: float | None, poll_s: float,
                     tick: Callable[[], object] | None = None, tick_s: float = 2.0) -> JobView:  # fmt: skip
    """Poll until the job is SUCCEEDED or FAILED; TimeoutError after ``timeout`` seconds. ``tick``
    runs every ``tick_s`` seconds (the embedded engine looks after its agent: a lost one must not make
    a wait hang)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    last_tick = time.monotonic()
    while True:
        view = get()
        if view.status.is_terminal():
            return view
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"job {view.name} still {view.status.value} after {timeout} s")
        if tick is not None and time.monotonic() - last_tick > tick_s:
            tick()
            last_tick = time.monotonic()
        time.sleep(poll_s)


# Events that mark a run's start (the embedded engine's placement, Slurm's) and a run's end once
# the gang is back in the queue (preempted, or failed and restarted).
RUN_STARTS = ("Scheduled", "Placed")


def previous_run(view: JobView) -> tuple[float, float]:
    """When the run before the current one (or before the wait now) started and ended, from
    the job's events: the last ``Requeued`` and the start before it."""
    ends = [e.at for e in view.events if e.kind == "Requeued"]
    if not ends:
        raise NotFoundError(f"job {view.name} has no previous run: it was never preempted or restarted",
                            f"see its log with `ringleader logs {view.name}`")  # fmt: skip
    starts = [e.at for e in view.events if e.kind in RUN_STARTS and e.at <= ends[-1]]
    return (starts[-1] if starts else view.created_at), ends[-1]


def previous_log(folder: Path, view: JobView, instance: str | None, tail: int | None, timestamps: bool) -> str:
    """kubectl's `logs --previous`: the lines an instance wrote in the job's previous run (a
    requeued job's last run, kept in the same file, told apart by the lines' times). The chief
    by default: the previous run's launcher where it had one, else its first worker."""
    start, end = previous_run(view)
    if instance is None:
        launcher = folder / f"{view.name}-launcher.log"
        name = launcher.stem if launcher.exists() else f"{view.name}-worker-0"
    else:
        name = instance if (folder / f"{instance}.log").exists() else f"{view.name}-{instance}"
        if not (folder / f"{name}.log").exists():
            known = ", ".join(sorted(p.stem for p in folder.glob("*.log"))) or "(none)"
            raise NotFoundError(f"job {view.name} has no log of instance {instance!r}", f"use one of {known}")
    kept, keep = [], False
    for line in read_log(folder / f"{name}.log", None, True).splitlines(keepends=True):
        at = stamp_seconds(line)
        keep = keep if at is None else start <= at <= end  # a line without a time goes with the one before
        if keep:
            kept.append(line)
    kept = kept if tail is None else kept[len(kept) - tail :] if tail else []
    return "".join(line if timestamps else strip_stamp(line) for line in kept)
