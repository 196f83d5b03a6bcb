"""A lock shared by every process of this host, for what two commands must not interleave:
choosing a free subnet and taking it (a bridge with its address), in `cluster up` and in a Slurm
test cluster. Only root builds networks, and root's lock folder is /run/lock."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def host_lock(name: str) -> Iterator[None]:
    folder = Path("/run/lock") if os.path.isdir("/run/lock") else Path(tempfile.gettempdir())
    fd = os.open(folder / f"ringleader-{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
