"""The state folder (RINGLEADER_HOME) and the folders under it: the user's own, private, and
never reached through a symbolic link.

They hold job environments, logs, and pid files of processes ringleader later signals, so, as
ssh does for ~/.ssh, a folder another user owns or may write is refused, not used (as root,
a chmod or a removal would otherwise act wherever that user's links point). Below the state
folder every step is opened with O_NOFOLLOW relative to its parent's descriptor, so a link put
in place of `logs` or a job's folder is neither followed by a mode change nor by a removal.
The state folder itself may be a link the user made (~/.ringleader -> /data/ringleader): its
target is what is checked, and so is every folder above it and every link on the way
(``check_ancestors``): each must be root's or the user's, and none another user may write unless
it is sticky (as /tmp is) and the entry in it the user's, or they could swap it later. Files of
the folder are opened relative to its descriptor, never through a link (``open_file``,
``write_file``).
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
    user, 0700 whatever the umask, with nobody else able to swap a folder above it. Raises
    OSError(EROFS) on a read-only file system."""
    check_ancestors(home)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_ancestors(home)  # what mkdir made, and the target of a link it went through
    with _opened(home) as home_fd:
        _make_private(home_fd, home, home)
        for name in PRIVATE_DIRS:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=home_fd)
            with _opened_below(home_fd, name, home) as fd:
                _make_private(fd, home / name, home)


def check_reachable(home: Path) -> None:
    """One line (StateError) where this user may not even look into the state folder (another
    user's RINGLEADER_HOME, a folder under another user's 0700 folder)."""
    try:
        os.stat(os.path.join(home, "."))  # pathlib would drop the "."; looking in needs the right to search it
    except FileNotFoundError:
        return
    except (PermissionError, NotADirectoryError) as exc:
        owner = next((p for p in (home, *home.parents) if os.path.exists(p)), home)
        raise StateError(
            f"cannot look into the state folder {home} ({exc.strerror}): {owner} belongs to "
            f"{_user(os.stat(owner).st_uid)}",
            "set RINGLEADER_HOME to a folder of your own",
        ) from None


def check_ancestors(home: Path) -> None:
    """Refuse a state folder another user could redirect: a link on the way to it that another
    user owns, or a folder above it (on the way as written, and as resolved) that another user
    owns or may write. A sticky folder others may write (/tmp) is fine when the entry in it is
    root's or this user's: only its owner may rename or remove it there."""
    written = Path(os.path.abspath(home))
    for path in (written, Path(os.path.realpath(written))):
        for parent, entry in zip(path.parents[::-1], [*path.parents[::-1][1:], path], strict=True):
            try:
                st: os.stat_result | None = os.lstat(entry)
            except FileNotFoundError:
                st = None  # made by this user from here on, in a parent checked first
            _check_entry(parent, entry, st)
            if st is None:
                break


def _check_entry(parent: Path, entry: Path, st: os.stat_result | None) -> None:
    me = os.geteuid()
    trusted = (me, 0)
    if st is not None and stat.S_ISLNK(st.st_mode) and st.st_uid not in trusted:
        raise StateError(
            f"the state folder's path goes through {entry}, a link {_user(st.st_uid)} owns and could point "
            "anywhere",
            f"set RINGLEADER_HOME to the real folder, or to a folder of your own (not through {entry})",
        )
    pst = os.stat(parent)
    if pst.st_uid not in trusted:
        raise StateError(
            f"{parent}, above the state folder, belongs to {_user(pst.st_uid)}, who could replace {entry}",
            "set RINGLEADER_HOME to a folder under folders only you or root own",
        )
    shared = pst.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if shared and not pst.st_mode & stat.S_ISVTX:
        raise StateError(
            f"{parent}, above the state folder, can be written by others (mode {stat.S_IMODE(pst.st_mode):o}): "
            f"they could replace {entry}",
            f"chmod o-w,g-w {parent} (or make it sticky: chmod +t), or set RINGLEADER_HOME elsewhere",
        )
    if shared and st is not None and st.st_uid not in trusted:
        raise StateError(
            f"{entry}, on the way to the state folder, belongs to {_user(st.st_uid)} in the shared folder {parent}",
            f"set RINGLEADER_HOME to a folder of your own (not through {entry})",
        )


def open_file(home: Path, relative: str, flags: int = os.O_RDONLY) -> int:
    """A file of the state folder (``relative``: "config.json", "logs/JOB/FILE"), each step
    below the folder opened relative to the one before with O_NOFOLLOW: a link anywhere below
    it is one line (StateError), never followed. OSError as os.open raises it otherwise."""
    *folders, name = relative.split("/")
    fd = os.open(home, _DIR)
    try:
        for folder in folders:
            try:
                below = os.open(folder, _DIR | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise _link_error(exc, fd, folder, home / folder) from None
            os.close(fd)
            fd, home = below, home / folder
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
        except OSError as exc:
            raise _link_error(exc, fd, name, home / name) from None
    finally:
        os.close(fd)


def write_file(folder: Path, name: str, data: bytes) -> None:
    """Replace the file ``name`` of the state folder or one of its folders whole, or not at all
    (a new file renamed over it: a link in its place is replaced, never written through; a
    process killed as it writes leaves the old file, never half of a new one; a full disk leaves
    no temporary behind)."""
    fd = os.open(folder, _DIR)
    try:
        tmp = f".{name}.tmp{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=fd)  # a killed process's, whose pid this one now has
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
        try:
            with os.fdopen(out, "wb") as fh:
                fh.write(data)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            raise
    finally:
        os.close(fd)


def _link_error(exc: OSError, parent_fd: int, name: str, path: Path) -> OSError | StateError:
    """A link where a file or folder of the state folder should be, as one line; else ``exc``."""
    if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(parent_fd, name)):
        return StateError(
            f"{path} in the state folder is a symbolic link (ringleader never follows one there)",
            f"remove the link (rm {path})",
        )
    return exc


def make_job_folders(home: Path, job: str) -> None:
    """``logs/<job>`` and ``run/<job>`` as private folders of their own: whatever else holds
    their names (a link planted while the job waited) is removed first, never followed."""
    with _opened(home) as home_fd:
        for name in PRIVATE_DIRS:
            with _opened_below(home_fd, name, home) as parent_fd:
                with contextlib.suppress(FileNotFoundError):
                    if not stat.S_ISDIR(os.lstat(job, dir_fd=parent_fd).st_mode):
                        remove_entry(parent_fd, job)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(job, 0o700, dir_fd=parent_fd)


def remove_job_folders(home: Path, job: str, which: tuple[str, ...] = PRIVATE_DIRS) -> None:
    """Remove ``logs/<job>`` and ``run/<job>`` (or only those of ``which``) without following a
    link anywhere: a link in their place is removed itself, never what it points to. Missing
    folders are fine."""
    if not home.is_dir():
        return
    with _opened(home) as home_fd:
        for name in which:
            try:
                with _opened_below(home_fd, name, home) as parent_fd:
                    remove_entry(parent_fd, job)
            except FileNotFoundError:
                continue


def remove_entry(parent_fd: int, name: str) -> None:
    """Remove ``name`` in the folder ``parent_fd`` whatever it is, never following a link."""
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
