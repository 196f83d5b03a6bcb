"""Reliability at the edges: private state whatever the umask, damaged state refused (never
re-created over), bounded and strictly typed inputs, one line instead of a traceback."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import JobSpec, Runtime
from statecopy import copy_of, idle
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


def cli(home: Path, *args: str, umask: int | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RINGLEADER_HOME": str(home), "RINGLEADER_GRACE_S": "1"}
    pre = (lambda: os.umask(umask)) if umask is not None else None
    return subprocess.run([sys.executable, "-m", "ringleader.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=120, preexec_fn=pre, cwd=cwd or REPO)  # fmt: skip


def one_line_error(done: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    return done.stderr


def modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


@pytest.mark.slow
@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_state_is_private_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    home = tmp_path / "home"
    done = cli(home, "submit", "mpi", "--name", "secret", "-e", "SECRET_TOKEN=abc", "--", sys.executable, "-c",
               "print('hi')", umask=umask)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert cli(home, "logs", "-f", "secret").returncode == 0
    found = modes(home)
    assert found.pop(".") == 0o700
    assert found, "the job left files"
    for name, mode in found.items():
        assert mode & 0o077 == 0, f"{name} is {oct(mode)}"


def test_empty_state_database_is_refused_not_recreated(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli(home, "cluster", "apply", "-f", str(REPO / "examples" / "seeds-cluster.yaml")).returncode == 0
    (home / "state.db").write_bytes(b"")
    for wal in home.glob("state.db-*"):
        wal.unlink()
    err = one_line_error(cli(home, "list"))
    assert "is empty" in err and "state.db" in err
    assert (home / "state.db").stat().st_size == 0  # left as it was, for the user to look at


def test_garbage_state_database_is_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "state.db").write_bytes(b"this is not sqlite" * 100)
    assert "not a ringleader database" in one_line_error(cli(home, "list"))


def test_write_lock_held_elsewhere_is_a_bounded_busy_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli(home, "cluster", "apply", "-f", str(REPO / "examples" / "seeds-cluster.yaml")).returncode == 0
    holder = sqlite3.connect(home / "state.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        env_busy = {"RINGLEADER_LOCK_TIMEOUT_S": "1"}
        os.environ.update(env_busy)
        done = cli(home, "submit", "mpi", "--name", "waits", "--", sys.executable, "-c", "pass")
    finally:
        os.environ.pop("RINGLEADER_LOCK_TIMEOUT_S", None)
        holder.execute("ROLLBACK")
        holder.close()
    assert "busy" in one_line_error(done, code=1)
    assert "waits" not in cli(home, "list").stdout


@pytest.mark.parametrize(
    ("node_extra", "problem"),
    [
        ("network_gbps: .nan", "network_gbps"),
        ("network_gbps: .inf", "network_gbps"),
        ("network_gbps: '25'", "network_gbps"),
        ("labels: [a, b]", "labels"),
        ("count: 100000000", "count"),
        ("count: true", "count"),
        ("emulated: 'yes'", "emulated"),
    ],
)
def test_bad_cluster_values_are_one_line(tmp_path: Path, node_extra: str, problem: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"nodes:\n  - name: n\n    preset: dgx1v\n    emulated: true\n    {node_extra}\n".replace(
        "emulated: true\n    emulated", "emulated"))  # fmt: skip
    home = tmp_path / "home"
    assert problem in one_line_error(cli(home, "cluster", "apply", "-f", str(path)))
    assert not home.exists()


@pytest.mark.parametrize("content", [b"\xff\xfe\x00garbage", b"nodes:\n  - name: \xe9t\xe9\n"])
def test_non_utf8_cluster_file_is_one_line_naming_it(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    err = one_line_error(cli(tmp_path / "home", "cluster", "apply", "-f", str(path)))
    assert str(path) in err and "UTF-8" in err


def test_huge_inputs_are_refused_before_reading_them_all(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"  # a device that never ends is not even read: only regular files are
    path.write_text("nodes:\n  - name: n\n    matrix_file: /dev/zero\n    emulated: true\n")
    refused = one_line_error(cli(tmp_path / "home", "cluster", "apply", "-f", str(path)))
    assert "file '/dev/zero' is a device or socket, not a regular file" in refused
    big = tmp_path / "big.yaml"
    big.write_text("nodes:\n" + "#" * (40 << 20) + "\n")
    assert "too big" in one_line_error(cli(tmp_path / "home", "cluster", "apply", "-f", str(big)))


@pytest.mark.parametrize("name", ["ok\n", "ok\n\n", "\nok"])
def test_names_with_newlines_are_refused(tmp_path: Path, name: str) -> None:
    home = tmp_path / "home"
    one_line_error(cli(home, "submit", "mpi", "--name", name, "--", sys.executable, "-c", "pass"))
    assert not (home / "logs").exists()


def test_priority_beyond_its_range_is_one_line(tmp_path: Path) -> None:
    done = cli(tmp_path / "home", "submit", "mpi", "--name", "p", "--priority", str(2**70), "--", sys.executable,
               "-c", "pass")  # fmt: skip
    assert "priority" in one_line_error(done)


def test_deleted_working_directory_is_one_line(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    code = (
        "import os, sys, subprocess; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]); "
        "r = subprocess.run([sys.executable, '-m', 'ringleader.cli.main', 'submit', 'mpi', '--name', 'w', '--', "
        "sys.executable, '-c', 'pass']); sys.exit(r.returncode)"
    )
    env = {**os.environ, "RINGLEADER_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-c", code, str(gone)], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert "working directory" in one_line_error(done)


def test_waiting_job_that_a_smaller_cluster_makes_impossible_is_told_so(tmp_path: Path) -> None:
    def cluster(n: int) -> Path:
        path = tmp_path / f"c{n}.yaml"
        node = "  - name: n{}\n    preset: dgx1v\n    emulated: true\n"
        path.write_text("nodes:\n" + "".join(node.format(i) for i in range(n)))
        return path

    rt = Runtime.open(tmp_path / "home")
    try:
        rt.apply_cluster(cluster(3))
        hold = JobSpec("hold", 1, 8, [sys.executable, "-c", "import time; time.sleep(60)"])
        rt.submit(hold)
        rt.submit(JobSpec("waiter", 3, 8, [sys.executable, "-c", "pass"]))  # 24 GPUs: n0 is held
        rt.apply_cluster(cluster(1))  # n1 and n2 are free, so they may go
        assert any("waiter can never run on this cluster now" in n for n in rt.notes)
        waiter = rt.get("waiter")
        assert waiter.reason and waiter.reason.startswith("can never run on the cluster as declared now")
    finally:
        rt.delete([j.name for j in rt.list_jobs()])
        rt.close()


@pytest.fixture(scope="module")
def one_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state folder with the seeds cluster and a finished job `j`, made once through the CLI;
    each test damages its own copy."""
    home = tmp_path_factory.mktemp("one-job") / "home"
    assert cli(home, "cluster", "apply", "-f", str(REPO / "examples" / "seeds-cluster.yaml")).returncode == 0
    assert cli(home, "submit", "mpi", "--name", "j", "--", sys.executable, "-c", "pass").returncode == 0
    with Runtime.open(home) as rt:
        assert rt.wait("j", timeout=60).status.value == "SUCCEEDED"
    return idle(home)


@pytest.mark.parametrize(
    ("damage", "commands"),
    [
        ("UPDATE jobs SET spec = '{not json'", (["list"], ["get", "j"])),
        ("UPDATE jobs SET status = 'BOGUS'", (["list"], ["get", "j"])),
        ("DROP TABLE instances", (["get", "j"], ["delete", "j"])),
        ("UPDATE topologies SET spec = '{}' WHERE id = (SELECT topology FROM nodes WHERE name != 'local')",
         (["top", "node"], ["submit", "mpi", "--name", "k", "--", "true"])),
        ("UPDATE topologies SET spec = '[]' WHERE id = (SELECT topology FROM nodes WHERE name != 'local')",
         (["top", "node"], ["submit", "mpi", "--name", "k", "--", "true"])),
        ("UPDATE topologies SET spec = '5' WHERE id = (SELECT topology FROM nodes WHERE name != 'local')",
         (["top", "node"], ["submit", "mpi", "--name", "k", "--", "true"])),
        ("""UPDATE topologies SET spec = '{"links": [["NV1"]]}'
            WHERE id = (SELECT topology FROM nodes WHERE name != 'local')""",
         (["top", "node"], ["submit", "mpi", "--name", "k", "--", "true"])),
    ],
)
def test_damaged_state_rows_are_one_line(tmp_path: Path, damage: str, commands: tuple[list[str], ...],
                                         one_job: Path) -> None:  # fmt: skip
    home = copy_of(one_job, tmp_path / "home")
    conn = sqlite3.connect(home / "state.db", isolation_level=None)
    conn.execute(damage)
    conn.close()
    for args in commands:
        err = one_line_error(cli(home, *args))
        assert "damaged" in err and "state import" in err
    if "jobs SET" in damage:  # a damaged job row is cleared with delete
        assert cli(home, "delete", "j").returncode == 0
        assert cli(home, "list").returncode == 0


def test_damaged_page_is_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli(home, "cluster", "apply", "-f", str(REPO / "examples" / "seeds-cluster.yaml")).returncode == 0
    assert cli(home, "list").returncode == 0  # checkpointed and closed
    db = home / "state.db"
    data = bytearray(db.read_bytes())
    data[4096 + 8 : 4096 + 4000] = b"\xa5" * (4000 - 8)  # the second page's cells
    db.write_bytes(bytes(data))
    done = cli(home, "top", "node")
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.slow
def test_read_only_home_refuses_submit_and_delete_and_stops_nothing(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a read-only file system")
    home, view = tmp_path / "home", tmp_path / "read-only-view"
    assert cli(home, "cluster", "apply", "-f", str(REPO / "examples" / "seeds-cluster.yaml")).returncode == 0
    view.mkdir()
    # The same state seen through a read-only bind mount (the running job's files stay open).
    subprocess.run(["mount", "--bind", str(home), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        marker = f"ro-marker-{os.getpid()}"
        assert cli(home, "submit", "mpi", "--name", "live", "--", sys.executable, "-c",
                   "import time; time.sleep(60)", marker).returncode == 0  # fmt: skip
        wait_for(lambda: marker in subprocess.run(["ps", "-ww", "-eo", "args="], capture_output=True, text=True).stdout,
                 what="the job to start")  # fmt: skip
        assert "read-only file system" in one_line_error(cli(view, "delete", "live"), code=2).lower()
        assert marker in subprocess.run(["ps", "-ww", "-eo", "args="], capture_output=True, text=True).stdout
        refused = one_line_error(cli(view, "submit", "mpi", "--name", "new", "--", "true"), code=2)
        assert "read-only file system" in refused.lower()
        assert cli(view, "list").returncode == 0  # reads still work
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)
    assert cli(home, "delete", "live").returncode == 0


def test_read_only_home_with_nothing_running_is_read_and_refuses_writes_in_one_line(tmp_path: Path) -> None:
    """No process holds the state open: its -wal and -shm files are gone, and SQLite cannot
    make them on a read-only file system (once read as "not a ringleader database")."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a read-only file system")
    home, view = tmp_path / "home", tmp_path / "read-only-view"
    assert cli(home, "cluster", "apply", "-f", str(REPO / "examples" / "seeds-cluster.yaml")).returncode == 0
    assert cli(home, "submit", "mpi", "--name", "done", "--", "true").returncode == 0
    # Each look runs a command (a process of its own): one a second, not back to back.
    wait_for(lambda: not (home / "state.db-wal").exists() and "Succeeded" in cli(home, "get", "done").stdout.title(),
             what="the job to end and its supervisor to close the state", every=1.0)  # fmt: skip
    view.mkdir()
    subprocess.run(["mount", "--bind", str(home), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        listed = cli(view, "list")
        assert listed.returncode == 0 and "done" in listed.stdout, listed.stderr
        for args in (["submit", "mpi", "--name", "new", "--", "true"], ["delete", "done"],
                     ["node", "label", "cn-shanghai-172", "k=v"]):  # fmt: skip
            assert "read-only file system" in one_line_error(cli(view, *args), code=2).lower()
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)


@pytest.mark.parametrize(
    "args",
    [
        ["predict", "--model", "vgg16", "--batch-size", "64", "--workers", "4", "--gpus", "1", "--calibration", "{f}"],
        ["simulate", "--cluster", str(REPO / "examples" / "sim" / "cluster-2x8-v100.yaml"), "--trace", "{f}"],
        ["calibrate", "{f}"],
        ["predict", "--model", "vgg16", "--batch-size", "64", "--workers", "4", "--gpus", "1", "--cluster", "{f}"],
    ],
)
def test_non_utf8_input_files_of_every_command_are_one_line(tmp_path: Path, args: list[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"nodes:\n  - name: \xe9\n")
    err = one_line_error(cli(tmp_path / "home", *[a.replace("{f}", str(bad)) for a in args]))
    assert "not UTF-8" in err and str(bad) in err
