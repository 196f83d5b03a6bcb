"""The state folder (RINGLEADER_HOME) and the folders under it: the user's own, private, and
never reached through a symbolic link.

They hold job environments, logs, and pid files of processes ringleader later signals, so, as
ssh does for ~/.ssh, a folder another user owns or may write is refused, not used (as root,
a chmod or a removal would otherwise act wherever that user's links point). Below the state
folder every step is opened with O_NOFOLLOW relative to its parent's descriptor, so a link put
in place of `logs` or a job's folder is neither followed by a mode change nor by a removal.
The state folder itself may be a link the user made (~/.ringleader -> /data/ringleader): its
target is what is checked.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from ringleader.errors import StateError

PRIVATE_DIRS = ("logs", "run")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def make_private_home(home: Path) -> None:
    """Create (if missing) and check the state folder and its job folders: owned by this
    user, 0700 whatever the umask. Raises OSError(EROFS) on a read-only file system."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _opened(home) as home_fd:
        _make_private(home_fd, home, home)
        for name in PRIVATE_DIRS:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=home_fd)
            with _opened_below(home_fd, name, home) as fd:
                _make_private(fd, home / name, home)


def remove_job_folders(home: Path, job: str) -> None:
    """Remove ``logs/<job>`` and ``run/<job>`` without following a link anywhere: a link in
    their place is removed itself, never what it points to. Missing folders are fine."""
    if not home.is_dir():
        return
    with _opened(home) as home_fd:
        for name in PRIVATE_DIRS:
            try:
                with _opened_below(home_fd, name, home) as parent_fd:
                    _remove_entry(parent_fd, job)
            except FileNotFoundError:
                continue


def _remove_entry(parent_fd: int, name: str) -> None:
    try:
        st = os.lstat(name, dir_fd=parent_fd)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        # shutil.rmtree on a directory descriptor walks with O_NOFOLLOW at every level.
        shutil.rmtree(name, dir_fd=parent_fd, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=parent_fd)


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[int]:
    fd = os.open(path, _DIR)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _opened_below(parent_fd: int, name: str, home: Path) -> Iterator[int]:
    path = home / name
    try:
        fd = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=parent_fd)
    except OSError as exc:
        # A link fails O_NOFOLLOW with ELOOP, or O_DIRECTORY first with ENOTDIR.
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(parent_fd, name)):
            raise StateError(
                f"{path} in the state folder is a symbolic link (ringleader never follows one there)",
                f"remove the link (rm {path}); ringleader makes the folder again",
            ) from None
        if exc.errno == errno.ENOTDIR:
            raise StateError(
                f"{path} in the state folder is not a folder", f"move it away (mv {path} {path}.bad)"
            ) from None
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def _is_link(parent_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=parent_fd).st_mode)
    except OSError:
        return False


def _make_private(fd: int, path: Path, home: Path) -> None:
    st = os.fstat(fd)
    me = os.geteuid()
    if st.st_uid != me:
        raise StateError(
            f"the state folder {path} belongs to {_user(st.st_uid)}, not to you ({_user(me)}); ringleader "
            "does not use a state another user controls",
            f"set RINGLEADER_HOME to a folder of your own, or if this one is yours: chown -R {_user(me)} {home}",
        )
    writers = [who for who, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit]
    if writers:
        raise StateError(
            f"the state folder {path} can be written by {' and '.join(writers)} (mode "
            f"{stat.S_IMODE(st.st_mode):o}): they could put files there that ringleader runs or signals",
            f"chmod 700 {path}, or set RINGLEADER_HOME to a private folder",
        )
    os.fchmod(fd, 0o700)  # group and others may not read it either (job environments); EROFS: read-only


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
