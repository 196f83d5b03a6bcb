"""A full disk under the state folder (a 512 KiB tmpfs, root only): a job that fills it with
output must not stay RUNNING with its GPUs held; reads keep working; once space is freed the
state is truthful again without anyone repairing it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import JobSpec, Runtime
from statecopy import copy_of, idle
from waiting import WAIT_S, wait_for

pytestmark = pytest.mark.slow

NOISY = "import sys\nfor i in range(20000): print('line', i, 'x' * 60)\n"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        # Nothing of the test may outlive it, whatever failed: stop every process started there.
        subprocess.run(["pkill", "-KILL", "-f", str(mount)], check=False)
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_job_filling_the_disk_ends_truthfully_and_frees_its_gpus(small_disk: Path, monkeypatch) -> None:
    home = small_disk / "home"
    monkeypatch.setenv("RINGLEADER_HOME", str(home))
    monkeypatch.setenv("RINGLEADER_GRACE_S", "1")
    rt = Runtime.open(home)
    nodes = small_disk.parent / "c.yaml"
    nodes.write_text("nodes:\n  - name: box\n    preset: pcie-4gpu-workstation\n    emulated: true\n")
    rt.apply_cluster(nodes)
    # Room held back now and given back once the job has filled the rest: written after the
    # submit, a busy machine let the job's output take it all first, and nothing was freed.
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (128 << 10))
    rt.submit(JobSpec("noisy", 2, 1, [sys.executable, "-c", NOISY]))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            rt.list_jobs()  # reads work on a full disk
            rt.get("noisy")
        except Exception as exc:  # pragma: no cover - the failure this test is about
            pytest.fail(f"a read failed on a full disk: {exc!r}")
        time.sleep(0.5)
        if rt.get("noisy").status.is_terminal():
            break
    filler.unlink(missing_ok=True)  # space again: whatever was not recorded must be now
    view = Runtime.open(home).wait("noisy", timeout=WAIT_S)
    assert view.status.is_terminal()
    assert all(i.status in ("Succeeded", "Failed", "Stopped") for i in view.instances)
    assert rt.nodes().free_gpus == rt.nodes().total_gpus
    rt.delete(["noisy"])
    rt.close()


# -- commands on a full disk: one line, nothing changed ------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RINGLEADER_HOME": str(home), "RINGLEADER_GRACE_S": "1"}
    env.pop("RINGLEADER_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "ringleader.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=120, cwd=REPO)  # fmt: skip


def fill_leaving(mount: Path, free_bytes: int) -> Path:
    """A file taking all the room of ``mount`` but ``free_bytes``."""
    vfs = os.statvfs(mount)
    filler = mount / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as out:
        out.write(b"\0" * max(0, vfs.f_bavail * vfs.f_frsize - free_bytes))
    return filler


def refusal_problem(done: subprocess.CompletedProcess[str]) -> str | None:
    """What is wrong with a refusal for want of room, or None when it is the one line it must be."""
    if done.returncode != 1 or "Traceback" in done.stderr or done.stderr.count("\n") != 1:
        return f"rc={done.returncode}: {done.stderr[-300:]!r}"
    if "no room to write the state" not in done.stderr or "To fix: free some space" not in done.stderr:
        return done.stderr
    return None


# Room left when the command starts (the reserve already given back by an earlier write, or kept):
# from none (even opening fails) to enough to open but not to commit.
ROOM = [(0, False), (0, True), (16 << 10, False), (40 << 10, False), (64 << 10, False), (96 << 10, False)]
COMMANDS = {
    "submit": lambda n: ["submit", "mpi", "--name", f"new{n}", "--workers", "1", "--gpus", "1", "--", "true"],
    "node label": lambda n: ["node", "label", "box", f"k{n}=v"],
    "cluster apply": lambda n: ["cluster", "apply", "-f", "{cluster}"],
    "delete": lambda n: ["delete", f"old{n}"],
}


Prepared = tuple[Path, Path]  # a state folder no process has open, and the cluster file it applied


@pytest.fixture(scope="module")
def finished_jobs(tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    """A state folder with a cluster applied and finished jobs `old0`... for `delete` to remove,
    made once through the CLI and copied by each test that starts from it (its own copy, so
    what one test's commands change no other test sees), and the cluster file it applied."""
    root = tmp_path_factory.mktemp("finished-jobs")
    home, cluster = root / "home", root / "c.yaml"
    cluster.write_text("nodes:\n  - name: box\n    preset: pcie-4gpu-workstation\n    emulated: true\n")
    assert cli(home, "cluster", "apply", "-f", str(cluster)).returncode == 0
    for n in range(len(ROOM)):
        assert cli(home, "submit", "mpi", "--name", f"old{n}", "--", "true").returncode == 0
    with Runtime.open(home) as rt:
        for n in range(len(ROOM)):
            rt.wait(f"old{n}", timeout=60)
    return idle(home), cluster


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_on_a_full_disk_is_one_line_and_changes_nothing(small_disk: Path, command: str,
                                                                  finished_jobs: Prepared) -> None:  # fmt: skip
    from statedb import dump_db

    template, cluster = finished_jobs
    home = copy_of(template, small_disk / "home")
    refusals, problems = 0, []
    for n, (room, keep_reserve) in enumerate(ROOM):
        before = dump_db(home)
        if not keep_reserve:
            (home / ".reserve").unlink(missing_ok=True)
        filler = fill_leaving(small_disk, room)
        args = [a.replace("{cluster}", str(cluster)) for a in COMMANDS[command](n)]
        done = cli(home, *args)
        filler.unlink()
        if done.returncode != 0:
            refusals += 1
            problem = refusal_problem(done)
            if problem is None and dump_db(home) != before:
                problem = "refused, but the state changed"
            if problem:
                problems.append(f"{room} bytes free{' (reserve kept)' if keep_reserve else ''}: {problem}")
    assert not problems, "\n".join(problems)
    assert refusals, "the disk was never full enough to refuse"


FLOOD_THEN_WAIT = NOISY + "import time\ntime.sleep(120)\n"


def wait_until_full(mount: Path) -> None:
    """Until ``mount`` has under 16 KiB free at two looks 0.5 s apart."""
    full_since: float | None = None

    def full_for_a_while() -> bool:
        nonlocal full_since
        vfs = os.statvfs(mount)
        if vfs.f_bavail * vfs.f_frsize > 16 << 10:
            full_since = None
        elif full_since is None:
            full_since = time.monotonic()
        return full_since is not None and time.monotonic() - full_since >= 0.5

    wait_for(full_for_a_while, what="the job to fill the disk")


def test_while_a_job_fills_the_disk_commands_refuse_in_one_line_and_deleting_it_frees_the_room(
    small_disk: Path, tmp_path: Path
) -> None:
    from statedb import dump_db

    home = small_disk / "home"
    cluster = tmp_path / "c.yaml"
    cluster.write_text("nodes:\n  - name: box\n    preset: pcie-4gpu-workstation\n    emulated: true\n")
    assert cli(home, "cluster", "apply", "-f", str(cluster)).returncode == 0
    assert cli(home, "submit", "mpi", "--name", "noisy", "--gpus", "1", "--", sys.executable, "-c",
               FLOOD_THEN_WAIT).returncode == 0  # fmt: skip
    wait_until_full(small_disk)
    # Deterministic under load: the reserve spent, as a write of the agent's on the full disk
    # may or may not have spent it by now (its room would let a command rightly succeed). The
    # job's log writer has stopped at the full disk, so a file takes the reserve's room.
    (home / ".reserve").unlink(missing_ok=True)
    spent = fill_leaving(small_disk, 0)
    before = dump_db(home)
    for args in (["submit", "mpi", "--name", "next", "--", "true"], ["node", "label", "box", "k=v"],
                 ["cluster", "apply", "-f", str(cluster)]):  # fmt: skip
        done = cli(home, *args)
        assert done.returncode != 0, f"{args} had room to write"
        assert refusal_problem(done) is None, (args, done.stderr)
    assert dump_db(home) == before
    listed = cli(home, "list")
    assert listed.returncode == 0 and "noisy" in listed.stdout  # reads work on the full disk
    spent.unlink()  # the reserve's room back, as the next command would find it
    assert cli(home, "delete", "noisy").returncode == 0  # its log was what filled the disk
    assert cli(home, "submit", "mpi", "--name", "after", "--", "true").returncode == 0


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_over_its_disk_quota_is_one_line_and_changes_nothing(tmp_path: Path, command: str,
                                                                       finished_jobs: Prepared) -> None:  # fmt: skip
    """EDQUOT, which SQLite reports as a disk I/O error, not as a full disk: injected into the
    command's writes of the state (strace), as no file system here keeps quotas for tests."""
    import shutil

    from statedb import dump_db

    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("needs strace to inject EDQUOT")
    template, cluster = finished_jobs
    home = copy_of(template, tmp_path / "home")
    before = dump_db(home)
    args = [a.replace("{cluster}", str(cluster)) for a in COMMANDS[command](0)]
    env = {**os.environ, "RINGLEADER_HOME": str(home), "RINGLEADER_GRACE_S": "1"}
    env.pop("RINGLEADER_DEBUG", None)
    done = subprocess.run(
        [strace, "-f", "-qq", "-o", "/dev/null", "-P", str(home / "state.db-wal"), "-e", "trace=pwrite64,write",
         "-e", "inject=pwrite64,write:error=EDQUOT", sys.executable, "-m", "ringleader.cli.main", *args],
        env=env, capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert refusal_problem(done) is None, done.stderr
    assert dump_db(home) == before


def test_a_holder_keeps_beating_on_a_full_disk(small_disk: Path) -> None:
    """An agent whose job filled the disk must not look stuck to its standby or a command (they
    would kill it after the lease): its heartbeat is rewritten in place, needing no new room."""
    from ringleader.engines.embedded.liveness import HEARTBEAT_S, Heartbeat, read_beat
    from ringleader.runtime.procs import start_time

    path = small_disk / "home" / "run" / "agent.beat"
    path.parent.mkdir(parents=True)
    me = os.getpid()
    beat = Heartbeat(path, me, start_time(me)).start()
    try:
        with contextlib.suppress(OSError), open(small_disk / "filler", "wb") as fh:
            while True:
                fh.write(b"\0" * (64 << 10))
        assert os.statvfs(small_disk).f_bavail == 0
        time.sleep(4 * HEARTBEAT_S)
        read = read_beat(path)
        assert read is not None and read[:2] == (me, start_time(me))
        silent = read[2]
        assert silent is not None and silent < 2 * HEARTBEAT_S, f"no beat for {silent} s on a full disk"
    finally:
        beat.stop()


@pytest.mark.parametrize("room", [0, 4 << 10, 16 << 10, 40 << 10, 96 << 10])
def test_a_first_command_on_a_full_disk_leaves_a_folder_that_works_once_there_is_room(
    small_disk: Path, room: int
) -> None:
    home = small_disk / "home"
    filler = fill_leaving(small_disk, room)
    done = cli(home, "submit", "mpi", "--name", "first", "--", "true")
    filler.unlink()
    if done.returncode != 0:
        assert refusal_problem(done) is None, refusal_problem(done)
        db = home / "state.db"
        assert not db.exists() or db.stat().st_size > 0, "a 0-byte state.db was left behind"
    listed = cli(home, "list")
    assert listed.returncode == 0, listed.stderr  # never "its jobs and cluster are lost"
    assert cli(home, "submit", "mpi", "--name", "second", "--", "true").returncode == 0


def test_state_export_onto_a_full_disk_is_one_line_and_leaves_no_partial_copy(small_disk: Path,
                                                                               tmp_path: Path) -> None:  # fmt: skip
    home = tmp_path / "home"  # the state elsewhere, with room; the copy goes to the full disk
    assert cli(home, "submit", "mpi", "--name", "a", "--", "true").returncode == 0
    filler = fill_leaving(small_disk, 4 << 10)
    done = cli(home, "state", "export", str(small_disk / "backup.db"))
    filler.unlink()
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "cannot write" in done.stderr and "To fix:" in done.stderr
    assert not (small_disk / "backup.db").exists()
