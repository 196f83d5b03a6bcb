"""The state folder is the user's own and private, and nothing under it is reached through a
symbolic link: a folder another user owns or may write is refused in one line (as ssh refuses
~/.ssh), a link in place of `logs` or of a job's folder is never followed by a mode change or a
removal. Also: GPUs held by a job that no longer exists are freed."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ringleader.engines.embedded import store
from ringleader.engines.embedded.engine import Runtime
from ringleader.errors import StateError
from statecopy import copy_of, idle
from statedb import dump_db
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "nodes:\n  - name: box\n    preset: pcie-4gpu-workstation\n    emulated: true\n"


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RINGLEADER_HOME": str(home), "RINGLEADER_GRACE_S": "1"}
    env.pop("RINGLEADER_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "ringleader.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=120, cwd=REPO)  # fmt: skip


def one_line(done: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    return done.stderr


def snapshot(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every entry under ``root`` (itself included): mode, owner, and a file's content."""
    out = {}
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        out[str(path.relative_to(root))] = (st.st_mode, st.st_uid, path.read_bytes() if path.is_file() else b"")
    return out


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Someone else's folder, with a folder named like the job the tests submit."""
    where = tmp_path / "victim"
    (where / "job").mkdir(parents=True)
    (where / "job" / "precious.txt").write_text("keep me")
    (where / "notes.txt").write_text("keep me too")
    where.chmod(0o755)
    return where


def submit(home: Path, name: str = "job") -> subprocess.CompletedProcess[str]:
    return cli(home, "submit", "mpi", "--name", name, "--", sys.executable, "-c", "print('hello')")


def test_a_state_folder_another_user_owns_is_refused_and_its_links_are_not_followed(tmp_path: Path,
                                                                                     victim: Path) -> None:  # fmt: skip
    if os.geteuid() != 0:
        pytest.skip("needs root to give the state folder to another user")
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "logs").symlink_to(victim)
    os.chown(home, 65534, 65534)
    os.chown(home / "logs", 65534, 65534, follow_symlinks=False)
    before = snapshot(victim)
    err = one_line(submit(home))
    assert f"the state folder {home} belongs to" in err and "To fix: set RINGLEADER_HOME to a folder of your own" in err
    assert snapshot(victim) == before
    assert sorted(p.name for p in home.iterdir()) == ["logs"]


def test_a_link_in_place_of_logs_is_refused_and_not_followed(tmp_path: Path, victim: Path) -> None:
    home = tmp_path / "home"
    assert submit(home, "first").returncode == 0
    Runtime.open(home).wait("first", timeout=60)
    before_state = dump_db(home)
    (home / "logs").rename(tmp_path / "old-logs")
    (home / "logs").symlink_to(victim)
    before = snapshot(victim)
    for args in (["submit", "mpi", "--name", "job", "--", "true"], ["list"], ["delete", "first"]):
        err = one_line(cli(home, *args))
        assert f"{home / 'logs'} in the state folder is a symbolic link" in err and f"rm {home / 'logs'}" in err
    assert snapshot(victim) == before
    assert dump_db(home) == before_state


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777], ids=["group", "others", "everyone"])
def test_a_state_folder_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    home = tmp_path / "home"
    assert submit(home, "first").returncode == 0
    Runtime.open(home).wait("first", timeout=60)
    before = dump_db(home)
    for where in (home, home / "run"):
        where.chmod(mode)
        err = one_line(submit(home))
        assert f"the state folder {where} can be written by" in err and f"chmod 700 {where}" in err
        assert stat.S_IMODE(where.stat().st_mode) == mode  # refused, not silently changed
        assert dump_db(home) == before
        where.chmod(0o700)


def test_a_link_in_place_of_a_jobs_folder_is_removed_never_followed(tmp_path: Path, victim: Path) -> None:
    home = tmp_path / "home"
    assert submit(home, "first").returncode == 0  # the state and its folders exist
    Runtime.open(home).wait("first", timeout=60)
    (home / "logs" / "job").symlink_to(victim / "job")
    (home / "run" / "job").symlink_to(victim)
    before = snapshot(victim)
    assert submit(home).returncode == 0  # clears what a killed delete of a same-named job left
    view = Runtime.open(home).wait("job", timeout=60)
    assert view.status.value == "SUCCEEDED", view
    assert not (home / "logs" / "job").is_symlink() and (home / "logs" / "job").is_dir()
    assert "hello" in cli(home, "logs", "job").stdout
    assert snapshot(victim) == before
    (home / "logs" / "first").rename(home / "logs" / "first-real")
    (home / "logs" / "first").symlink_to(victim)
    assert cli(home, "delete", "first", "job").returncode == 0
    assert snapshot(victim) == before
    assert not (home / "logs" / "first").exists() and (home / "logs" / "first-real").is_dir()


def test_gpus_held_by_a_job_that_no_longer_exists_are_freed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cluster = tmp_path / "c.yaml"
    cluster.write_text(CLUSTER)
    assert cli(home, "cluster", "apply", "-f", str(cluster)).returncode == 0
    conn = sqlite3.connect(home / "state.db", isolation_level=None)
    conn.executemany("INSERT INTO allocations (node, gpu, job) VALUES ('box', ?, 'ghost')", [(g,) for g in range(4)])
    conn.close()
    done = cli(home, "submit", "mpi", "--name", "big", "--gpus", "4", "--", "true")
    assert done.returncode == 0, done.stderr
    assert "note: freed GPU(s) box:0 box:1 box:2 box:3 held by job 'ghost', which does not exist" in done.stderr
    assert "RUNNING" in done.stdout, done.stdout  # placed at once on the GPUs freed
    # Each look runs a command (a process of its own): one a second, not back to back.
    wait_for(lambda: "SUCCEEDED" in cli(home, "get", "big").stdout, what="job big to succeed", every=1.0)
    conn = sqlite3.connect(home / "state.db")
    assert conn.execute("SELECT count(*) FROM allocations").fetchone()[0] == 0
    conn.close()


def test_racing_first_commands_on_a_new_folder_all_work(tmp_path: Path) -> None:
    home = tmp_path / "new"
    env = {**os.environ, "RINGLEADER_HOME": str(home)}
    line = [sys.executable, "-m", "ringleader.cli.main"]
    racers = [subprocess.Popen([*line, "submit", "mpi", "--name", f"j{n}", "--", "true"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for n in range(10)]  # fmt: skip
    results = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in racers]
    assert all(code == 0 for code, _ in results), [err for code, err in results if code]
    with Runtime.open(home) as rt:
        assert {j.name for j in rt.list_jobs()} == {f"j{n}" for n in range(10)}


def test_engine_use_never_writes_through_a_link_nor_into_a_refused_folder(tmp_path: Path, victim: Path) -> None:
    home = tmp_path / "home"
    assert cli(home, "engine", "use", "embedded").returncode == 0  # the folder made
    (home / "config.json").unlink()
    (home / "config.json").symlink_to(victim / "notes.txt")
    before = snapshot(victim)
    err = one_line(cli(home, "engine", "use", "slurm"))
    assert f"{home / 'config.json'} in the state folder is a symbolic link" in err
    one_line(cli(home, "list"))  # every command: the default engine is never read through it either
    assert snapshot(victim) == before
    (home / "config.json").unlink()
    home.chmod(0o777)
    err = one_line(cli(home, "engine", "use", "slurm"))
    assert "can be written by" in err and not (home / "config.json").exists()
    home.chmod(0o700)
    assert cli(home, "engine", "use", "slurm").returncode == 0
    assert (home / "config.json").read_text() == '{"engine": "slurm"}'


def test_engine_use_on_a_read_only_folder_is_one_line(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a read-only folder")
    home = tmp_path / "home"
    assert cli(home, "engine", "use", "embedded").returncode == 0  # the folder made
    subprocess.run(["mount", "--bind", str(home), str(home)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(home)], check=True)
        err = one_line(cli(home, "engine", "use", "slurm"))
        assert f"cannot write {home / 'config.json'} (Read-only file system)" in err
    finally:
        subprocess.run(["umount", str(home)], check=False)


def test_a_folder_above_the_state_folder_others_may_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone may rename what is in it
    home = shared / "home"
    err = one_line(submit(home))
    assert f"{shared}, above the state folder, can be written by others" in err
    assert not home.exists()
    shared.chmod(0o1777)  # sticky, like /tmp: only an entry's owner may replace it
    assert submit(home).returncode == 0


def test_a_link_another_user_planted_on_the_way_is_not_followed(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to plant a link as another user")
    public = tmp_path / "public"
    public.mkdir()
    public.chmod(0o1777)
    target = tmp_path / "where-they-want-it"
    (public / "rl").symlink_to(target)
    os.chown(public / "rl", 65534, 65534, follow_symlinks=False)
    err = one_line(submit(public / "rl"))
    assert f"goes through {public / 'rl'}, a link nobody owns and could point anywhere" in err
    assert not target.exists()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    err = one_line(submit(theirs / "home"))
    assert f"{theirs}, above the state folder, belongs to" in err and "could replace" in err
    assert not (theirs / "home").exists()


def test_a_link_planted_in_a_waiting_jobs_log_folder_is_never_written_through(tmp_path: Path, victim: Path) -> None:
    home = tmp_path / "home"
    (tmp_path / "c.yaml").write_text(CLUSTER)
    assert cli(home, "cluster", "apply", "-f", str(tmp_path / "c.yaml")).returncode == 0
    hold = ["submit", "mpi", "--name", "hold", "--gpus", "4", "--", sys.executable, "-c",
            "import time; time.sleep(300)"]
    assert cli(home, *hold).returncode == 0
    assert cli(home, "submit", "mpi", "--name", "job", "--gpus", "1", "--", sys.executable, "-c",
               "print('hello')").returncode == 0  # fmt: skip
    (home / "logs" / "job").mkdir(mode=0o700, exist_ok=True)
    (home / "logs" / "job" / "job-worker-0.log").symlink_to(victim / "notes.txt")
    before = snapshot(victim)
    assert cli(home, "delete", "hold").returncode == 0  # the job starts now
    view = Runtime.open(home).wait("job", timeout=60)
    assert view.status.value == "SUCCEEDED", view
    assert snapshot(victim) == before
    assert "hello" in cli(home, "logs", "job").stdout
    log = home / "logs" / "job" / "job-worker-0.log"
    log.unlink()
    log.symlink_to(victim / "notes.txt")
    err = one_line(cli(home, "logs", "job"))
    assert "is a symbolic link" in err and "keep me too" not in err


@pytest.fixture(scope="module")
def first_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with one finished job, its agent gone (one still there would write its own open
    file, moved by the tests), made once; each test moves things in its own copy."""
    home = tmp_path_factory.mktemp("first-job") / "home"
    assert submit(home, "first").returncode == 0
    Runtime.open(home).wait("first", timeout=60)
    return idle(home)


def test_a_state_database_that_is_a_link_is_refused(tmp_path: Path, victim: Path, first_job: Path) -> None:
    home = copy_of(first_job, tmp_path / "home")
    (home / "state.db").rename(victim / "state.db")
    (home / "state.db").symlink_to(victim / "state.db")
    before = snapshot(victim)
    for args in (["list"], ["submit", "mpi", "--name", "x", "--", "true"]):
        err = one_line(cli(home, *args))
        assert f"{home / 'state.db'} in the state folder is a symbolic link" in err
    assert snapshot(victim) == before


def test_a_link_planted_while_the_state_is_being_opened_is_refused_before_anything_is_read(
    tmp_path: Path, victim: Path, monkeypatch: pytest.MonkeyPatch, first_job: Path
) -> None:
    """The link appears after the check and before SQLite connects (an agent opening the state
    under load): refused all the same, and nothing is made or changed beside its target."""
    home = copy_of(first_job, tmp_path / "home")
    connect = store._connect

    def plant_then_connect(target: str) -> sqlite3.Connection:
        if not (home / "state.db").is_symlink():
            (home / "state.db").rename(victim / "state.db")
            (home / "state.db").symlink_to(victim / "state.db")
        return connect(target)

    before = snapshot(victim)
    monkeypatch.setattr(store, "_connect", plant_then_connect)
    with pytest.raises(StateError, match="in the state folder is a symbolic link"):
        Runtime.open(home).list_jobs()
    after = snapshot(victim)
    assert "state.db" in after and {k: v for k, v in after.items() if k != "state.db"} == before  # no -wal, -shm


@pytest.mark.parametrize("planted", ["folder", "link"])
def test_something_else_at_the_agents_log_does_not_stop_the_queue(tmp_path: Path, victim: Path, planted: str) -> None:
    home = tmp_path / "home"
    assert cli(home, "engine", "use", "embedded").returncode == 0  # the folder made
    log = home / "run" / "agent.log"
    log.unlink(missing_ok=True)
    if planted == "folder":
        log.mkdir()
    else:
        log.symlink_to(victim / "notes.txt")
    before = snapshot(victim)
    assert submit(home).returncode == 0
    view = Runtime.open(home).wait("job", timeout=60)
    assert view.status.value == "SUCCEEDED", view
    assert snapshot(victim) == before
    assert log.is_file() and not log.is_symlink()


def test_another_users_state_folder_is_one_line_for_every_command(tmp_path: Path) -> None:
    """RINGLEADER_HOME naming root's private folder, as another user: one line, never a traceback."""
    import sysconfig

    if os.geteuid() != 0:
        pytest.skip("needs root to run a command as another user")
    runuser = shutil.which("runuser", path=f"{os.defpath}:/usr/sbin:/sbin")
    if runuser is None:
        pytest.skip("runuser (util-linux) is not installed")
    src = str(REPO / "src")
    packages = sysconfig.get_paths()["purelib"]
    python = "/usr/bin/python3"
    probe = subprocess.run([runuser, "-u", "nobody", "--", python, "-c",
                            f"import sys, os; assert sys.version_info[:2] == {sys.version_info[:2]!r}; "
                            f"assert os.access({src!r}, os.R_OK | os.X_OK) and os.access({packages!r}, os.R_OK)"],
                           capture_output=True)  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"user nobody cannot run this checkout with {python} (a private clone, another Python)")
    home = tmp_path / "home"
    assert submit(home, "mine").returncode == 0
    tmp_path.chmod(0o755)
    env = {"PATH": os.defpath, "RINGLEADER_HOME": str(home), "PYTHONPATH": f"{src}:{packages}"}
    for args in (["list"], ["get", "mine"], ["submit", "mpi", "--name", "theirs", "--", "true"], ["logs", "mine"]):
        out = subprocess.run([runuser, "-u", "nobody", "--", python, "-m", "ringleader.cli.main", *args], env=env,
                             capture_output=True, text=True, cwd="/", timeout=60)  # fmt: skip
        assert "Traceback" not in out.stderr, out.stderr
        assert out.returncode == 2 and out.stderr.count("\n") == 1, (args, out.stderr)
        assert f"cannot look into the state folder {home} (Permission denied)" in out.stderr
