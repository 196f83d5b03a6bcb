"""The one module that owns SQLite: schema and its version, WAL, transactions, rows <-> values.

Every read-decide-write runs inside ``Store.write()`` (``BEGIN IMMEDIATE``), so two processes
never decide on the same snapshot; ``allocations`` has (node, gpu) as its primary key, so even a
bug could not give one GPU to two jobs. Values are stored as JSON, never pickled.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ringleader import settings
from ringleader.errors import BusyError, DiskFullError, RingleaderError, StateError
from ringleader.jobs.codec import (
    address_from_dict,
    address_to_dict,
    labels_from_dict,
    topology_from_dict,
    topology_to_dict,
)
from ringleader.jobs.states import JobStatus, Launch, can_launch_move, can_move
from ringleader.scheduler import ClusterState, NodeState, Placement
from ringleader.scheduler.order import QueueOrder
from ringleader.scheduler.teams import TeamQueue, decayed
from ringleader.statefolder import check_reachable, make_private_home
from ringleader.topology import NodeSpec, NodeTopology
from ringleader.topology.network import tree_from_dict, tree_of, tree_to_dict

T = TypeVar("T")
APP_ID = "ringleader"
SCHEMA_VERSION = 8
DB_NAME = "state.db"
NETWORK_KEY = "network_tree"  # meta: the declared network tree above the nodes (JSON), if any

# Migrations by target version; each list runs in one transaction. Never edit a released one.
MIGRATIONS: dict[int, list[str]] = {
    1: [
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE nodes (name TEXT PRIMARY KEY, ord INTEGER NOT NULL, spec TEXT NOT NULL)",
        """CREATE TABLE jobs (
            seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE,
            status TEXT NOT NULL, priority INTEGER NOT NULL, spec TEXT NOT NULL,
            created_at REAL NOT NULL, started_at REAL, ended_at REAL, reason TEXT,
            decision TEXT, placement TEXT, supervisor_pid INTEGER, supervisor_start INTEGER,
            launched_at REAL)""",
        """CREATE TABLE instances (
            job TEXT NOT NULL, name TEXT NOT NULL, idx INTEGER NOT NULL, role TEXT NOT NULL,
            status TEXT NOT NULL, node TEXT, gpus TEXT NOT NULL, gpu_requested INTEGER NOT NULL,
            is_chief INTEGER NOT NULL, pid INTEGER, pid_start INTEGER, exit_code INTEGER,
            started_at REAL, ended_at REAL, PRIMARY KEY (job, name))""",
        """CREATE TABLE allocations (
            node TEXT NOT NULL, gpu INTEGER NOT NULL, job TEXT NOT NULL, PRIMARY KEY (node, gpu))""",
        """CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, at REAL NOT NULL,
            kind TEXT NOT NULL, message TEXT NOT NULL)""",
        "CREATE INDEX events_job ON events (job, id)",
    ],
    # Each distinct node topology stored once and nodes pointing at it, with their other
    # fields as columns: reading a 10,000-node cluster decodes a handful of topologies, not
    # 10,000 JSON documents of 64 links each.
    2: [
        "CREATE TABLE topologies (id INTEGER PRIMARY KEY, spec TEXT NOT NULL UNIQUE)",
        "INSERT OR IGNORE INTO topologies (spec) SELECT json_extract(spec, '$.topology') FROM nodes ORDER BY ord",
        """CREATE TABLE nodes_v2 (
            name TEXT PRIMARY KEY, ord INTEGER NOT NULL,
            topology INTEGER NOT NULL REFERENCES topologies (id),
            network_gbps REAL NOT NULL, labels TEXT NOT NULL, emulated INTEGER NOT NULL, address TEXT,
            nvlink_domain TEXT NOT NULL DEFAULT '')""",
        """INSERT INTO nodes_v2 SELECT
            name, ord, (SELECT id FROM topologies t WHERE t.spec = json_extract(n.spec, '$.topology')),
            json_extract(spec, '$.network_gbps'), coalesce(json_extract(spec, '$.labels'), '{}'),
            coalesce(json_extract(spec, '$.emulated'), 0), json_extract(spec, '$.address'),
            coalesce(json_extract(spec, '$.nvlink_domain'), '') FROM nodes n""",
        "DROP TABLE nodes",
        "ALTER TABLE nodes_v2 RENAME TO nodes",
    ],
    # When a job was placed, on the boot-time clock (liveness.clock_stamp): how long its
    # supervisor has had to claim it, whatever the wall clock does meanwhile.
    3: ["ALTER TABLE jobs ADD COLUMN placed_clock TEXT"],
    # One agent per folder: a running job's launch (jobs.states.Launch) and a delete's request
    # (the grace its ranks get) replace per-job supervisors' claims and their clocks.
    4: [
        "ALTER TABLE jobs ADD COLUMN launch TEXT",
        "ALTER TABLE jobs ADD COLUMN stop_grace REAL",
        """UPDATE jobs SET launch = CASE WHEN launched_at IS NULL THEN 'placed' ELSE 'starting' END
            WHERE status = 'RUNNING'""",
        "ALTER TABLE jobs DROP COLUMN launched_at",
        "ALTER TABLE jobs DROP COLUMN placed_clock",
    ],
    # Gang preemption: how often a job was preempted and requeued (its ranks see it as
    # RINGLEADER_RESTARTS, to resume from their checkpoint).
    5: ["ALTER TABLE jobs ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0"],
    # Team queues (scheduler/teams.py): quota as JSON [[type, GPUs], ...]; and each queue's
    # usage of ended runs, decayed GPU-seconds as of a time, for fair share.
    6: [
        """CREATE TABLE queues (
            name TEXT PRIMARY KEY, quota TEXT NOT NULL, weight REAL NOT NULL, cohort TEXT,
            created_at REAL NOT NULL)""",
        "CREATE TABLE queue_usage (queue TEXT PRIMARY KEY, gpu_s REAL NOT NULL, as_of REAL NOT NULL)",
        # Restarts (jobs/failures.py): faults blamed on a node, and nodes cordoned (no new job
        # placed there) with the reason, until `node uncordon`.
        """CREATE TABLE node_faults (
            id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT NOT NULL, job TEXT NOT NULL, at REAL NOT NULL,
            why TEXT NOT NULL)""",
        "CREATE TABLE cordons (node TEXT PRIMARY KEY, reason TEXT NOT NULL, at REAL NOT NULL)",
    ],
    # A queue's order of its jobs (scheduler/order.py: fifo, las, srtf; NULL: the default).
    7: ["ALTER TABLE queues ADD COLUMN queue_order TEXT"],
    # Restarts as they took on this cluster, which price a move's (scheduler/move.py): a run
    # placed again after its requeue, from its placement to its program's first line in a
    # rank's log. The cluster's record, not the job's: kept when the job is deleted.
    8: [
        """CREATE TABLE restarts (
            id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, placed_at REAL NOT NULL,
            resumed_at REAL NOT NULL, UNIQUE (job, placed_at))""",
    ],
}


def default_home() -> Path:
    return Path(settings.text("RINGLEADER_HOME") or Path.home() / ".ringleader")


@dataclass
class Store:
    """A connection to ``<home>/state.db``; ``ephemeral`` when the file did not exist and the
    caller only reads (nothing is written to disk until something needs writing)."""

    home: Path
    conn: sqlite3.Connection
    ephemeral: bool = False
    read_only: bool = False  # on a read-only file system: reads only
    full_when_opened: bool = False  # read only because the disk was full: writes retry opening

    @property
    def path(self) -> Path:
        return self.home / DB_NAME

    @staticmethod
    def open(home: Path, create: bool, reserve: bool = True) -> tuple[Store, bool]:
        """Open (and with ``create`` make) the database; returns (store, created_now).
        ``reserve=False``: leave the disk reserve alone (neither made nor given back), for a
        background look that must not change what room a user's command finds."""
        path = home / DB_NAME
        check_reachable(home)
        refuse_links(path)
        exists = path.exists()
        if not exists and not create:
            conn = _connect(":memory:")
            _migrate(conn, str(path))
            return Store(home, conn, ephemeral=True), False
        if exists and path.stat().st_size == 0:
            raise StateError(
                f"state database {path} is empty (0 bytes): its jobs and cluster are lost, and it is not "
                "re-created over them",
                f"restore a copy (`ringleader state import FILE`), or move it away (mv {path} {path}.empty) "
                "to start afresh",
            )
        try:
            return _open_file(home, path, exists, reserve)
        except (OSError, sqlite3.OperationalError) as exc:
            if not (reserve and disk_full(exc) and give_back_reserve(home)):
                return _open_failed(home, path, exists, exc)
        try:  # once more, with the reserve's room
            return _open_file(home, path, exists, reserve)
        except (OSError, sqlite3.OperationalError) as exc:
            return _open_failed(home, path, exists, exc)

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One read-decide-write transaction, holding the write lock from its first statement.
        Whatever fails, the COMMIT included (that is where a full disk shows), rolls back and is
        one line: nothing is changed."""
        if self.full_when_opened:
            self._reopen_for_writing()
        _begin_immediate(self.conn, self.path)
        try:
            with self._damage_named():
                yield self.conn
                self.conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")
            raise

    def _reopen_for_writing(self) -> None:
        """A store opened for reading only because the disk was full: writable again once
        there is room (a delete has just removed logs, say), else the disk-full error."""
        try:
            writable, _ = _open_file(self.home, self.path, exists=True)
        except (OSError, sqlite3.OperationalError) as exc:
            if disk_full(exc):
                raise _disk_full(self.path) from None
            raise _unusable(self.home, exc) from None
        self.conn.close()
        self.conn, self.read_only, self.full_when_opened = writable.conn, False, False

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for reading."""
        self.conn.execute("BEGIN")
        try:
            with self._damage_named():
                yield self.conn
        finally:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")

    @contextmanager
    def _damage_named(self) -> Iterator[None]:
        """What the database holds that ringleader cannot read (a damaged page, a dropped table,
        a row that is not JSON or names no known status) is one line naming the repair."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if disk_full(exc):
                raise _disk_full(self.path) from None
            if "locked" in str(exc) or "busy" in str(exc):
                raise
            if "readonly" in str(exc):
                raise _read_only(self.path) from None
            raise _damaged(self.path, str(exc)) from None
        except (sqlite3.DatabaseError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, RingleaderError):
                raise
            raise _damaged(self.path, f"{type(exc).__name__}: {exc}") from None


# A reserve file, made with the database and given back when the disk is full, so that SQLite
# (its -shm and -wal files) and the agent can still record what happened: a job must
# never stay RUNNING with its GPUs held because its end could not be written.
RESERVE = ".reserve"
RESERVE_BYTES = 64 << 10


def disk_full(exc: BaseException) -> bool:
    """No room to write: a full file system or an exceeded disk quota (SQLite reports the
    first as SQLITE_FULL and the second, EDQUOT, as a disk I/O error)."""
    if isinstance(exc, DiskFullError):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        return "full" in str(exc) or "disk I/O" in str(exc)
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _disk_full(path: Path) -> DiskFullError:
    return DiskFullError(
        f"no room to write the state {path}: its file system is full or your disk quota is exceeded",
        f"free some space there (see `df -h {path.parent}`, `quota -s`) and retry; nothing was changed",
    )


def keep_reserve(home: Path) -> None:
    """(Re)create the reserve when there is room; silently not when there is none."""
    path = home / RESERVE
    if path.exists():
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError:
        os.close(fd)
        path.unlink(missing_ok=True)
        return
    os.close(fd)


def give_back_reserve(home: Path) -> bool:
    try:
        (home / RESERVE).unlink()
        return True
    except OSError:
        return False


def while_disk_full(home: Path, fn: Callable[[], T], wait_s: float = 1.0, attempts: int | None = None) -> T:
    """``fn()``, retried while the disk is full (the reserve given back first), for ever by
    default: a supervisor must record what it saw, never give up and leave a job RUNNING. A
    command gives up after ``attempts`` with the disk-full error."""
    tried = 0
    while True:
        try:
            return fn()
        except (sqlite3.OperationalError, OSError, DiskFullError) as exc:
            tried += 1
            if not disk_full(exc) or (attempts is not None and tried >= attempts):
                raise
        if not give_back_reserve(home):
            time.sleep(wait_s)


def busy(exc: BaseException) -> bool:
    """The write lock was held by another process for longer than the lock timeout."""
    if isinstance(exc, BusyError):
        return True
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


def until_recorded(home: Path, fn: Callable[[], T], log: Callable[[str], None] | None = None) -> T:
    """``fn()`` retried while the disk is full or another process holds the write lock: a
    supervisor must record what it saw, never die of a busy state and leave a job RUNNING."""
    while True:
        try:
            return while_disk_full(home, fn)
        except (sqlite3.OperationalError, BusyError) as exc:
            if not busy(exc):
                raise
            if log is not None:
                log(f"the state is busy (write lock held elsewhere); retrying: {exc}")
            time.sleep(0.5)


def refuse_links(path: Path) -> None:
    """Refuse a database, -wal or -shm file that is a symbolic link: SQLite opens by name and
    would follow one (and make its -wal and -shm files beside the link's target)."""
    for part in (path, *(path.with_name(path.name + s) for s in ("-wal", "-shm"))):
        if part.is_symlink():
            raise StateError(
                f"{part} in the state folder is a symbolic link (ringleader never follows one there)",
                f"remove the link (rm {part}); restore a copy with `ringleader state import FILE`",
            )


def _connect_unlinked(path: Path, target: str) -> sqlite3.Connection:
    """``_connect`` to ``path`` (as ``target``), refused where a link took its place after it was
    checked: SQLite fixes the file and its -wal and -shm names when it connects and touches
    neither before the first statement, so a link planted earlier is seen here before anything
    is read or made through it (an agent opening the state while a link is planted, under load,
    made its -shm file in the link's target's folder)."""
    conn = _connect(target)
    try:
        refuse_links(path)
    except StateError:
        conn.close()
        raise
    return conn


def _open_file(home: Path, path: Path, exists: bool, reserve: bool = True) -> tuple[Store, bool]:
    try:
        make_private_home(home)
    except OSError as exc:
        if not exists or exc.errno != errno.EROFS:
            raise
        return _open_read_only(home, path), False  # a read-only file system: reads still work
    if not exists:
        _create(path)
    conn = _connect_unlinked(path, str(path))
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        _migrate(conn, str(path))
    except sqlite3.OperationalError:  # read-only, full disk, no permission
        conn.close()
        raise
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        conn.close()
        raise _not_ours(path, sqlite_problem(exc)) from None
    if reserve:
        keep_reserve(home)
    return Store(home, conn), not exists


def _create(path: Path) -> None:
    """Make the database whole beside ``path`` and link it into place, so that ``path`` is
    either a complete database or absent: a first write that fails (a full disk) leaves nothing
    to mistake for a lost state, and racing first commands find a database or make theirs (the
    first link wins; the others use it). Created private: SQLite gives its -wal and -shm files
    the same mode."""
    fresh = path.with_name(f".{path.name}.new-{os.getpid()}-{threading.get_ident()}")
    parts = [fresh.with_name(fresh.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")]
    try:
        os.close(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        conn = _connect(str(fresh))
        try:
            _migrate(conn, str(path))  # with a rollback journal: committed in the file itself
        finally:
            conn.close()
        with contextlib.suppress(FileExistsError):
            os.link(fresh, path)
    finally:
        for part in parts:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part)


def _open_failed(home: Path, path: Path, exists: bool, exc: Exception) -> tuple[Store, bool]:
    """An existing state on a full disk is still read (what is there, changing nothing: its
    writes retry and refuse in one line); anything else is the one-line reason."""
    if not disk_full(exc):
        raise _unusable(home, exc) from None
    if not exists:
        raise _disk_full(path) from None
    try:
        store = _open_read_only(home, path)
    except StateError:
        raise _disk_full(path) from None
    store.full_when_opened = True
    return store, False


def _open_read_only(home: Path, path: Path) -> Store:
    # Nobody can write a WAL database here without room for its -wal and -shm files: with no
    # -wal file (the last writer checkpointed it and closed) the file as it is, is the state,
    # and SQLite may read it without making a -shm file it cannot (immutable).
    wal = path.with_name(path.name + "-wal")
    settled = not wal.exists() or wal.stat().st_size == 0
    conn = _connect_unlinked(path, f"file:{path}?mode=ro{'&immutable=1' if settled else ''}")
    try:
        _version(conn, path)
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        conn.close()
        if "unable to open" in str(exc):  # a -wal file but no -shm file to read it with
            raise _read_only(path) from None
        raise _not_ours(path, sqlite_problem(exc)) from None
    return Store(home, conn, read_only=True)


def lock_timeout_s() -> float:
    """How long a write waits for the lock (RINGLEADER_LOCK_TIMEOUT_S, default 30 s: enough for
    dozens of racing commands, whose transactions take milliseconds)."""
    return settings.number("RINGLEADER_LOCK_TIMEOUT_S")


def _begin_immediate(conn: sqlite3.Connection, path: Path) -> None:
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if "readonly" in str(exc):
            raise _read_only(path) from None
        if disk_full(exc):  # the -shm file could not grow
            raise _disk_full(path) from None
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise
        raise BusyError(
            f"the state {path} is busy: another process held its write lock for {lock_timeout_s():g} s",
            "retry; if it stays busy, look for a stuck ringleader process (or raise RINGLEADER_LOCK_TIMEOUT_S)",
        ) from None


def _connect(target: str) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN/COMMIT ourselves.
    timeout = lock_timeout_s()
    conn = sqlite3.connect(target, timeout=timeout, isolation_level=None, uri=target.startswith("file:"))
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _unusable(home: Path, exc: Exception) -> StateError:
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return StateError(
        f"cannot write the state folder {home} ({detail})",
        "set RINGLEADER_HOME to a folder you can write (it is created if missing)",
    )


def _read_only(path: Path) -> StateError:
    return StateError(
        f"cannot write the state {path}: read-only file system", "remount it read-write, or use another folder"
    )


def _damaged(path: Path, detail: str) -> StateError:
    return StateError(
        f"state database {path} is damaged ({detail})",
        "restore a copy with `ringleader state import FILE`, or move it away to start afresh",
    )


def sqlite_problem(exc: Exception) -> str:
    """What SQLite said was wrong with a database. A flipped bit in its schema makes SQLite's
    own report of the damage quote bytes that are not UTF-8, which Python then fails to decode."""
    if isinstance(exc, UnicodeDecodeError):
        return "its schema is damaged: SQLite's report of it is not even UTF-8 text"
    return str(exc)


def _not_ours(path: Path, detail: str) -> StateError:
    return StateError(
        f"state database {path} is not a ringleader database or is corrupted ({detail})",
        f"move it away (mv {path} {path}.bad) or set RINGLEADER_HOME to another folder",
    )


def _migrate(conn: sqlite3.Connection, where: str) -> None:
    # The common case (already current) only reads, so racing commands do not queue for the lock.
    conn.execute("BEGIN")
    try:
        current = _version(conn, Path(where)) == SCHEMA_VERSION
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    if current:
        return
    _begin_immediate(conn, Path(where))
    try:
        version = _version(conn, Path(where))
        if version > SCHEMA_VERSION:
            raise StateError(
                f"state database {where} has schema version {version}, newer than this "
                f"ringleader's {SCHEMA_VERSION}",
                "upgrade ringleader, or set RINGLEADER_HOME to another folder",
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for stmt in MIGRATIONS[target]:
                conn.execute(stmt)
            if target == 1:
                conn.execute("INSERT INTO meta VALUES ('app', ?)", (APP_ID,))
                conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
            else:
                conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(target),))
    except BaseException:
        if conn.in_transaction:  # SQLite rolls back by itself on a full disk
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _version(conn: sqlite3.Connection, path: Path) -> int:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return 0
    if "meta" not in tables:
        raise _not_ours(path, "no meta table")
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("app") != APP_ID or not str(meta.get("schema_version", "")).isdigit():
        raise _not_ours(path, "meta table does not name ringleader")
    return int(meta["schema_version"])


# -- nodes ------------------------------------------------------------------------------------


def get_nodes(conn: sqlite3.Connection) -> list[NodeSpec]:
    """The declared nodes in order; nodes with equal topologies (or labels) share one decoded
    object, so the scheduler fingerprints each distinct topology once."""
    topologies = {r[0]: _stored_topology(r[0], r[1]) for r in conn.execute("SELECT id, spec FROM topologies")}
    labels: dict[str, tuple[tuple[str, str], ...]] = {}
    nodes = []
    rows = conn.execute(
        "SELECT name, topology, network_gbps, labels, emulated, address, nvlink_domain FROM nodes ORDER BY ord"
    )
    stored_tree = get_meta(conn, NETWORK_KEY)  # the network tree above the nodes, when declared
    tree = tree_from_dict(json.loads(stored_tree)) if stored_tree else None
    for name, topology, gbps, labels_text, emulated, address, domain in rows:
        node_labels = labels.get(labels_text)
        if node_labels is None:
            node_labels = labels[labels_text] = labels_from_dict(json.loads(labels_text))
        host = address_from_dict(json.loads(address)) if address else None
        place = tree.place_of(name) if tree is not None else None
        nodes.append(NodeSpec(name, topologies[topology], float(gbps), node_labels, bool(emulated), host, domain,
                              place))  # fmt: skip
    return nodes


def _stored_topology(row: int, text: str) -> NodeTopology:
    """A stored topology row, decoded; whatever it holds that is not a topology (a damaged or
    hand-edited row: `[]`, a matrix that is not one) is a ValueError, which reads as a damaged
    state, not as the cluster file's own error with its fix."""
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise TypeError(f"a JSON {type(doc).__name__}, not an object")
        return topology_from_dict(doc)
    except (RingleaderError, AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        detail = exc.message if isinstance(exc, RingleaderError) else str(exc)
        raise ValueError(f"stored topology {row} is not a node topology: {detail}") from None


def replace_nodes(conn: sqlite3.Connection, specs: Sequence[NodeSpec]) -> None:
    conn.execute("DELETE FROM nodes")
    ids: dict[int, int] = {}  # id(topology object) -> row id: declared clusters share objects
    rows = []
    for i, s in enumerate(specs):
        key = id(s.topology)
        if key not in ids:
            text = json.dumps(topology_to_dict(s.topology), separators=(",", ":"))
            conn.execute("INSERT OR IGNORE INTO topologies (spec) VALUES (?)", (text,))
            ids[key] = conn.execute("SELECT id FROM topologies WHERE spec = ?", (text,)).fetchone()[0]
        address = json.dumps(address_to_dict(s.address)) if s.address else None
        rows.append((s.name, i, ids[key], s.network_gbps, json.dumps(dict(s.labels)), int(s.emulated), address,
                     s.nvlink_domain))  # fmt: skip
    conn.executemany(
        "INSERT INTO nodes (name, ord, topology, network_gbps, labels, emulated, address, nvlink_domain)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.execute("DELETE FROM topologies WHERE id NOT IN (SELECT topology FROM nodes)")
    tree = tree_of((s.name, s.network) for s in specs)
    if tree is None:
        delete_meta(conn, NETWORK_KEY)
    else:
        set_meta(conn, NETWORK_KEY, json.dumps(tree_to_dict(tree), separators=(",", ":")))


def get_meta(conn: sqlite3.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))


def delete_meta(conn: sqlite3.Connection, key: str) -> None:
    conn.execute("DELETE FROM meta WHERE key = ?", (key,))


def cluster_state(conn: sqlite3.Connection) -> ClusterState:
    alloc: dict[str, list[tuple[int, str]]] = {}
    for r in conn.execute("SELECT node, gpu, job FROM allocations ORDER BY node, gpu"):
        alloc.setdefault(r["node"], []).append((int(r["gpu"]), str(r["job"])))
    return ClusterState(tuple(NodeState(s, tuple(alloc.get(s.name, ()))) for s in get_nodes(conn)))


# -- jobs -------------------------------------------------------------------------------------


def job_row(conn: sqlite3.Connection, name: str) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM jobs WHERE name = ?", (name,)).fetchone()


def job_rows(conn: sqlite3.Connection, statuses: Sequence[JobStatus] | None = ()) -> list[sqlite3.Row]:
    if not statuses:
        return conn.execute("SELECT * FROM jobs ORDER BY seq").fetchall()
    marks = ",".join("?" * len(statuses))
    return conn.execute(
        f"SELECT * FROM jobs WHERE status IN ({marks}) ORDER BY seq", [s.value for s in statuses]
    ).fetchall()


def insert_job(conn: sqlite3.Connection, spec: dict[str, Any], priority: int, now: float) -> None:
    conn.execute(
        "INSERT INTO jobs (name, status, priority, spec, created_at) VALUES (?, ?, ?, ?, ?)",
        (spec["name"], JobStatus.QUEUING.value, priority, json.dumps(spec), now),
    )


def update_job(conn: sqlite3.Connection, name: str, **fields: Any) -> None:
    """Set columns of a job; a status change must be in the transition table."""
    if "status" in fields:
        new = JobStatus(fields["status"].value if isinstance(fields["status"], JobStatus) else fields["status"])
        row = job_row(conn, name)
        old = JobStatus(row["status"]) if row else None
        if old is not None and not can_move(old, new):
            raise StateError(
                f"job {name}: {old.value} -> {new.value} is not an allowed transition",
                "this is a ringleader bug; please report it with `ringleader get NAME -e -o json`",
            )
        fields["status"] = new.value
    if "launch" in fields and fields["launch"] is None:  # requeued: no launch until placed again
        pass
    elif "launch" in fields:
        step = Launch(fields["launch"])
        row = job_row(conn, name)
        was = Launch(row["launch"]) if row and row["launch"] else None
        if was is not None and not can_launch_move(was, step):
            raise StateError(
                f"job {name}: launch {was.value} -> {step.value} is not an allowed transition",
                "this is a ringleader bug; please report it with `ringleader get NAME -e -o json`",
            )
        fields["launch"] = step.value
    cols = ", ".join(f"{k} = ?" for k in fields)
    conn.execute(f"UPDATE jobs SET {cols} WHERE name = ?", [*fields.values(), name])


def delete_instances(conn: sqlite3.Connection, job: str) -> None:
    conn.execute("DELETE FROM instances WHERE job = ?", (job,))


def delete_job(conn: sqlite3.Connection, name: str) -> None:
    for table in ("events", "instances", "allocations"):
        conn.execute(f"DELETE FROM {table} WHERE job = ?", (name,))
    conn.execute("DELETE FROM jobs WHERE name = ?", (name,))


def add_event(conn: sqlite3.Connection, job: str, kind: str, message: str, now: float) -> None:
    conn.execute("INSERT INTO events (job, at, kind, message) VALUES (?, ?, ?, ?)", (job, now, kind, message))


def last_event(conn: sqlite3.Connection, job: str, kind: str) -> str | None:
    row = conn.execute(
        "SELECT message FROM events WHERE job = ? AND kind = ? ORDER BY id DESC LIMIT 1", (job, kind)
    ).fetchone()
    return None if row is None else str(row[0])


def events(conn: sqlite3.Connection, job: str) -> list[sqlite3.Row]:
    return conn.execute("SELECT * FROM events WHERE job = ? ORDER BY id", (job,)).fetchall()


# -- allocations and instances ------------------------------------------------------------------


def allocate(conn: sqlite3.Connection, placement: Placement) -> None:
    conn.executemany(
        "INSERT INTO allocations (node, gpu, job) VALUES (?, ?, ?)",
        [(s.node, g, placement.job) for s in placement.slots for g in s.gpus],
    )


def free(conn: sqlite3.Connection, job: str) -> int:
    return conn.execute("DELETE FROM allocations WHERE job = ?", (job,)).rowcount


def orphan_allocations(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """Allocations of jobs that do not exist (a row left by a damaged or hand-edited state):
    GPUs nobody would ever free."""
    return conn.execute(
        "SELECT * FROM allocations WHERE job NOT IN (SELECT name FROM jobs) ORDER BY node, gpu"
    ).fetchall()


def free_orphans(conn: sqlite3.Connection) -> int:
    return conn.execute("DELETE FROM allocations WHERE job NOT IN (SELECT name FROM jobs)").rowcount


def instances(conn: sqlite3.Connection, job: str) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT * FROM instances WHERE job = ? ORDER BY role = 'worker', idx", (job,)
    ).fetchall()


def insert_instance(conn: sqlite3.Connection, job: str, name: str, idx: int, role: str, **fields: Any) -> None:
    cols = ["job", "name", "idx", "role", *fields]
    vals = [job, name, idx, role, *fields.values()]
    conn.execute(f"INSERT INTO instances ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", vals)


def update_instance(conn: sqlite3.Connection, job: str, name: str, **fields: Any) -> None:
    cols = ", ".join(f"{k} = ?" for k in fields)
    conn.execute(f"UPDATE instances SET {cols} WHERE job = ? AND name = ?", [*fields.values(), job, name])


# -- team queues ----------------------------------------------------------------------------------


def queues(conn: sqlite3.Connection) -> list[TeamQueue]:
    rows = conn.execute("SELECT name, quota, weight, cohort, queue_order FROM queues ORDER BY name").fetchall()
    return [TeamQueue(r["name"], tuple((str(k), int(n)) for k, n in json.loads(r["quota"])), float(r["weight"]),
                      r["cohort"], order=QueueOrder(r["queue_order"]) if r["queue_order"] else None)
            for r in rows]  # fmt: skip


def put_queue(conn: sqlite3.Connection, queue: TeamQueue, now: float) -> None:
    order = queue.order.value if queue.order is not None else None
    conn.execute(
        """INSERT INTO queues (name, quota, weight, cohort, created_at, queue_order) VALUES (?, ?, ?, ?, ?, ?)
           ON CONFLICT (name) DO UPDATE SET quota = excluded.quota, weight = excluded.weight,
           cohort = excluded.cohort, queue_order = excluded.queue_order""",
        (queue.name, json.dumps([list(q) for q in queue.quota]), queue.weight, queue.cohort, now, order),
    )


def delete_queue(conn: sqlite3.Connection, name: str) -> bool:
    conn.execute("DELETE FROM queue_usage WHERE queue = ?", (name,))
    return conn.execute("DELETE FROM queues WHERE name = ?", (name,)).rowcount > 0


def queue_usage(conn: sqlite3.Connection, now: float) -> dict[str, float]:
    """Each queue's ended runs, in GPU-seconds decayed to ``now``."""
    rows = conn.execute("SELECT queue, gpu_s, as_of FROM queue_usage").fetchall()
    return {r["queue"]: decayed(float(r["gpu_s"]), float(r["as_of"]), now) for r in rows}


def add_usage(conn: sqlite3.Connection, queue: str, gpu_s: float, now: float) -> None:
    """Add a run that ended at ``now`` (its decayed GPU-seconds) to ``queue``'s usage."""
    before = queue_usage(conn, now).get(queue, 0.0)
    conn.execute(
        """INSERT INTO queue_usage (queue, gpu_s, as_of) VALUES (?, ?, ?)
           ON CONFLICT (queue) DO UPDATE SET gpu_s = excluded.gpu_s, as_of = excluded.as_of""",
        (queue, before + gpu_s, now),
    )


# -- restarts -------------------------------------------------------------------------------------


def add_restart(conn: sqlite3.Connection, job: str, placed_at: float, resumed_at: float) -> None:
    """Record that ``job``'s run placed at ``placed_at`` after a requeue had its program write
    its first line at ``resumed_at``; once per run (an agent that adopts the run may say it again)."""
    conn.execute("INSERT OR IGNORE INTO restarts (job, placed_at, resumed_at) VALUES (?, ?, ?)",
                 (job, placed_at, resumed_at))  # fmt: skip


def recent_restarts(conn: sqlite3.Connection, limit: int) -> list[float]:
    """The seconds the ``limit`` most recently recorded restarts took, oldest first (never below
    0: a rank's log lines are stamped by the clock of the machine that wrote them)."""
    rows = conn.execute("SELECT resumed_at - placed_at FROM restarts ORDER BY id DESC LIMIT ?", (limit,))
    return [max(float(r[0]), 0.0) for r in rows][::-1]


# -- node faults and cordons ----------------------------------------------------------------------


def add_fault(conn: sqlite3.Connection, node: str, job: str, why: str, now: float) -> list[tuple[str, str]]:
    """Record a fault blamed on ``node``; returns every fault it has since it was last
    uncordoned, as (job, why), oldest first."""
    conn.execute("INSERT INTO node_faults (node, job, at, why) VALUES (?, ?, ?, ?)", (node, job, now, why))
    rows = conn.execute("SELECT job, why FROM node_faults WHERE node = ? ORDER BY at, rowid", (node,))
    return [(str(r[0]), str(r[1])) for r in rows]


def cordons(conn: sqlite3.Connection) -> dict[str, str]:
    """Cordoned node -> why."""
    return {r["node"]: r["reason"] for r in conn.execute("SELECT node, reason FROM cordons ORDER BY node")}


def cordon(conn: sqlite3.Connection, node: str, reason: str, now: float) -> None:
    conn.execute("INSERT OR REPLACE INTO cordons (node, reason, at) VALUES (?, ?, ?)", (node, reason, now))


def uncordon(conn: sqlite3.Connection, node: str) -> bool:
    """End a cordon and forget the node's faults; False when it was not cordoned."""
    conn.execute("DELETE FROM node_faults WHERE node = ?", (node,))
    return conn.execute("DELETE FROM cordons WHERE node = ?", (node,)).rowcount > 0
