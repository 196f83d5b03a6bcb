"""What a careless user or an attacker tries through the real command, each refused in one line
that names the problem and the fix (exit 2 for bad input), with nothing changed: never a
traceback, a hang, or nonsense kept. One test per way in."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import Runtime
from statecopy import copy_of, idle
from statedb import dump_db, kill_agents

REPO = Path(__file__).resolve().parents[2]
SEEDS = str(REPO / "examples" / "seeds-cluster.yaml")
PY = sys.executable
ROWS = "model,gpu_type,batch_size,nodes,gpus_per_node,images_per_s,node\n"


def train(**run: object) -> str:
    """`bench train -o json` results: a 1-worker run (the rate the others are priced with) and
    ``run``."""
    one = {"kind": "train", "model": "resnet50", "world_size": 1, "batch_size": 32, "images_per_sec_total": 100}
    return json.dumps([one, {**one, "images_per_sec_total": 150, **run}])


def cli(home: Path, *args: str, prelude: str = "", timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it (``prelude``: Python run first, in the same process)."""
    env = {**os.environ, "RINGLEADER_HOME": str(home), "RINGLEADER_GRACE_S": "1"}
    env.pop("RINGLEADER_DEBUG", None)
    code = f"{prelude}\nimport sys\nfrom ringleader.cli.main import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run([PY, "-c", code, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def one_line(done: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert done.returncode == code, (done.returncode, done.stdout[-1000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and "To fix: " in done.stderr, done.stderr
    return done.stderr


def ended_job(home: Path) -> None:
    """A state folder with the seeds' cluster and one ended job, its agent gone and its
    write-ahead log folded into the database file."""
    assert cli(home, "cluster", "apply", "-f", SEEDS).returncode == 0
    assert cli(home, "submit", "mpi", "--name", "done", "--", PY, "-c", "pass").returncode == 0
    Runtime.open(home).wait("done", 120)
    kill_agents(home)
    idle(home)
    conn = sqlite3.connect(home / "state.db")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


@pytest.fixture(scope="module")
def ended(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An `ended_job` folder made once; each test changes only its own copy of it."""
    home = tmp_path_factory.mktemp("ended") / "home"
    ended_job(home)
    return home


# -- the state database ---------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["list"], ["submit", "mpi", "--name", "x", "--", "true"], ["queue", "list"],
                                     ["top", "node"]], ids=" ".join)  # fmt: skip
def test_a_bit_flipped_in_the_state_schema_is_one_line_and_the_file_is_left_as_it_was(
    tmp_path: Path, command: list[str], ended: Path
) -> None:
    # SQLite reports the damaged schema quoting the flipped byte, which is not UTF-8 then.
    home = copy_of(ended, tmp_path / "home")
    db = home / "state.db"
    data = bytearray(db.read_bytes())
    data[data.index(b"CREATE TABLE jobs") + 5] ^= 0x80
    db.write_bytes(data)
    err = one_line(cli(home, *command))
    assert str(db) in err and "is corrupted (its schema is damaged" in err and f"mv {db} {db}.bad" in err
    assert db.read_bytes() == data


@pytest.mark.parametrize("verb", ["export", "import"])
def test_exporting_or_importing_another_users_state_is_one_line(tmp_path: Path, verb: str, ended: Path) -> None:
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv (util-linux) to act as a user without privileges")
    home = copy_of(ended, tmp_path / "theirs")
    copy = tmp_path / "copy.db"
    assert cli(home, "state", "export", str(copy)).returncode == 0
    for path in (home, *home.rglob("*")):
        os.chown(path, 65534, 65534, follow_symlinks=False)  # another user's (nobody's) state folder
    before = dump_db(home)
    target = tmp_path / "mine.db"
    args = ["state", "export", str(target)] if verb == "export" else ["state", "import", str(copy)]
    env = {**os.environ, "RINGLEADER_HOME": str(home)}
    env.pop("RINGLEADER_DEBUG", None)
    done = subprocess.run([setpriv, "--bounding-set=-all", "--inh-caps=-all", "--", PY, "-m", "ringleader.cli.main",
                           *args], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)  # fmt: skip
    err = one_line(done)
    assert f"cannot look into the state folder {home}" in err and "belongs to nobody" in err
    assert not target.exists() and dump_db(home) == before


# -- calibrate ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("gpus-beyond-the-preset.csv", ROWS + "resnet50,V100,64,2,16,5000,dgx1v\n",
         "line 2: gpus_per_node (a dgx1v node has 8) must be a whole number from 1 to 8, got '16'"),
        # 256 nodes and more never returned: each row is priced on a cluster of its nodes
        ("nodes-256.csv", ROWS + "resnet50,V100,64,256,8,5000,dgx1v\n",
         "line 2: nodes must be a whole number from 1 to 128, got '256'"),
        ("nodes-10^20.csv", ROWS + f"resnet50,V100,64,{10**20},8,5000,dgx1v\n",
         f"line 2: nodes must be a whole number from 1 to 128, got '{10**20}'"),
        ("nodes.json", train(world_size=256, nodes=256), "is malformed: nodes must be 1 to 128, got 256"),
        ("images-per-s.csv", ROWS + "resnet50,V100,64,2,8,1e308,dgx1v\nresnet50,V100,64,1,8,3000,dgx1v\n",
         "line 2: images_per_s must be > 0 and at most 1e+08, got '1e308'"),
        ("images-per-s.json", train(world_size=2, images_per_sec_total=1e308),
         "images_per_sec_total must be > 0 and at most 1e+08, got 1e+308"),
        ("world-size.json", train(world_size=100_000, nodes=100), "world_size must be 1 to 1024, got 100000"),
    ],
)  # fmt: skip
def test_calibrate_refuses_rows_it_cannot_price_in_one_line(tmp_path: Path, name: str, text: str,
                                                            expected: str) -> None:  # fmt: skip
    path = tmp_path / name
    path.write_text(text)
    done = cli(tmp_path / "home", "calibrate", str(path), "--out", str(tmp_path / "cal.json"))
    err = one_line(done)
    assert str(path) in err and expected in err, err
    assert done.stdout == "" and not (tmp_path / "cal.json").exists() and not (tmp_path / "home").exists()


# -- a base install -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hidden", "args", "expected"),
    [
        ("matplotlib", ["topo", "--presets", "dgx1v", "--png", "{out}"],
         "this command needs matplotlib, which is not installed. To fix: pip install 'ringleader[sim]'"),
        ("PIL", ["data", "synth", "--out", "{out}", "--images", "2"],
         "this command needs Pillow, which is not installed. To fix: pip install 'ringleader[bench]'"),
    ],
)  # fmt: skip
def test_a_command_needing_an_extra_says_which_to_install(tmp_path: Path, hidden: str, args: list[str],
                                                          expected: str) -> None:  # fmt: skip
    out = tmp_path / "out.png"
    # As in an install without the extra: importing the package fails as a missing one does.
    done = cli(tmp_path / "home", *[a.replace("{out}", str(out)) for a in args],
               prelude=f"import sys\nsys.modules[{hidden!r}] = None")  # fmt: skip
    assert expected in one_line(done)
    assert not out.exists()


# -- input files ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["cluster", "apply", "-f", "{fifo}"], "cluster file"),
        (["cluster", "apply", "-f", "{matrix_file}"], "file"),
        (["calibrate", "{fifo}.csv"], "throughput CSV"),
        (["calibrate", "{fifo}"], "bench result"),
        (["simulate", "--cluster", SEEDS, "--trace", "{fifo}"], "trace"),
    ],
)  # fmt: skip
def test_a_fifo_given_as_an_input_file_is_refused_not_waited_on(tmp_path: Path, args: list[str], what: str) -> None:
    fifo = tmp_path / "input"
    os.mkfifo(fifo)
    os.mkfifo(f"{fifo}.csv")
    matrix_file = tmp_path / "cluster.yaml"
    matrix_file.write_text(f"nodes:\n  - name: a\n    matrix_file: {fifo}\n    emulated: true\n")
    given = [a.replace("{fifo}", str(fifo)).replace("{matrix_file}", str(matrix_file)) for a in args]
    err = one_line(cli(tmp_path / "home", *given, timeout=60))
    assert "is a pipe, not a regular file. To fix: save the content to a file and give its path" in err, err
    assert what in err and not (tmp_path / "home").exists()


def test_a_gpu_model_with_terminal_control_codes_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"  # YAML's "\e" and "\a" escapes: ESC and BEL in the value
    path.write_text('nodes:\n  - name: a\n    preset: dgx1v\n    emulated: true\n    gpu_model: "V100\\e[31m\\a"\n')
    err = one_line(cli(tmp_path / "home", "cluster", "apply", "-f", str(path)))
    assert f"{path} line 2: gpu_model 'V100\\x1b[31m\\x07' holds a control character" in err
    assert not (tmp_path / "home").exists()


# -- submit, node, queue --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        (["-e", "RANK=7"], "-e RANK: ringleader sets RANK for each rank (its rank in the job), so this value would "
                           "be overridden. To fix: drop -e RANK"),
        (["-e", "CUDA_VISIBLE_DEVICES=3"], "-e CUDA_VISIBLE_DEVICES: ringleader sets CUDA_VISIBLE_DEVICES for each "
                                           "rank (the GPUs it was placed on)"),
        (["-e", "MASTER_PORT=1234"], "-e MASTER_PORT: ringleader sets MASTER_PORT"),
    ],
)  # fmt: skip
def test_a_variable_ringleader_sets_for_each_rank_is_refused_not_overridden(
    tmp_path: Path, option: list[str], expected: str
) -> None:
    home = tmp_path / "home"
    assert cli(home, "cluster", "apply", "-f", SEEDS).returncode == 0
    before = dump_db(home)
    assert expected in one_line(cli(home, "submit", "mpi", "--name", "own", *option, "--", PY, "-c", "pass"))
    assert dump_db(home) == before


def test_every_variable_a_rank_is_given_is_one_a_job_may_not_set() -> None:
    from ringleader.jobs.spec import SET_PER_RANK
    from ringleader.runtime.rank import rank_env

    plan = {"world_size": 2, "master_addr": "h", "master_port": 1, "job": "j"}
    entry = {"rank": 0, "local_rank": 0, "local_world_size": 1, "node_rank": 0, "instance": "j-worker-0",
             "node": "n", "gpus": [0], "node_gpus": [0]}  # fmt: skip
    for emulated in (True, False):
        given = rank_env(plan, {**entry, "emulated": emulated}, under_mpirun=True)
        assert set(given) <= set(SET_PER_RANK), set(given) - set(SET_PER_RANK)


@pytest.mark.parametrize(("reason", "expected"), [
    ("x" * 100_000, "Invalid value for '--reason': 100000 characters, more than 256: say it shorter"),
    ("disk\x1b[2J\x07", "Invalid value for '--reason': 'disk\\x1b[2J\\x07' holds a control character"),
], ids=["100000-characters", "control-codes"])  # fmt: skip
def test_a_cordon_reason_is_bounded_plain_text(tmp_path: Path, reason: str, expected: str) -> None:
    home = tmp_path / "home"
    assert cli(home, "cluster", "apply", "-f", SEEDS).returncode == 0
    before = dump_db(home)
    assert expected in one_line(cli(home, "node", "cordon", "cn-shanghai-172", "--reason", reason))
    assert dump_db(home) == before


def test_the_default_queue_queue_list_shows_is_the_one_submit_and_delete_know(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli(home, "cluster", "apply", "-f", SEEDS).returncode == 0
    assert "default" in cli(home, "queue", "list").stdout
    before = dump_db(home)
    err = one_line(cli(home, "queue", "delete", "default"))
    assert "'default' is the queue of jobs submitted without --queue: it always exists and cannot be deleted" in err
    assert dump_db(home) == before
    done = cli(home, "submit", "mpi", "--name", "in-default", "--queue", "default", "--", PY, "-c", "pass")
    assert done.returncode == 0, done.stderr
    view = Runtime.open(home).wait("in-default", 120)
    assert view.status.value == "SUCCEEDED" and view.spec.queue == "default"
