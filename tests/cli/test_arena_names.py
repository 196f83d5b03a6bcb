"""The names arena users type: `ls`, `log`, `del`, `submit mpijob|mj`, `submit pytorchjob|py`,
`version`, `completion`, `logs -t`, `prune -s`; arena's other job kinds pointed at `submit mpi` in
one line."""

from __future__ import annotations

import re
import sys

import pytest

from cli.conftest import EXAMPLES
from ringleader import __version__

pytestmark = pytest.mark.slow  # multi-process runs of seconds each: run early (tests/conftest.py)

PY = sys.executable


def test_short_names_are_the_same_commands(seeds_cli) -> None:  # type: ignore[no-untyped-def]
    seeds_cli.ok("submit", "mj", "--name", "hello", "--workers", "2", "--gpus", "1", "--", PY, "-c", "print('hi')")
    seeds_cli.ok("logs", "-f", "hello")  # until it ends
    assert seeds_cli.ok("ls") == seeds_cli.ok("list")
    assert seeds_cli.ok("log", "hello") == seeds_cli.ok("logs", "hello") == "hi\n"
    assert seeds_cli.ok("logs", "-t", "1", "hello") == "hi\n"
    assert seeds_cli.ok("submit", "mpijob", "--name", "dry", "--workers", "2", "--gpus", "1", "--dry-run", "--",
                        PY, "-c", "pass").startswith("Plan for job dry")  # fmt: skip
    seeds_cli.ok("prune", "-s", "1h")  # nothing that old: kept
    assert "hello" in seeds_cli.ok("ls")
    seeds_cli.ok("del", "hello")
    assert "hello" not in seeds_cli.ok("ls")


def test_version_and_completion(cli) -> None:  # type: ignore[no-untyped-def]
    assert cli.ok("version") == f"ringleader {__version__}\n"
    for shell in ("bash", "zsh", "fish"):
        assert "_RINGLEADER_COMPLETE" in cli.ok("completion", shell)
    refused = cli("completion", "tcsh")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1


def test_a_pytorch_job_as_arena_submits_one(seeds_cli) -> None:  # type: ignore[no-untyped-def]
    show = "import os; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], os.environ['MASTER_ADDR'])"
    seeds_cli.ok("submit", "pytorchjob", "--name", "pt", "--workers", "2", "--gpus", "1", "--", PY, "-c", show)
    seeds_cli.ok("logs", "-f", "pt")
    assert seeds_cli.ok("logs", "pt").startswith("rank 0 of 2 ")
    assert "rank 1 of 2 " in seeds_cli.ok("logs", "-i", "worker-1", "pt")
    row = next(line for line in seeds_cli.ok("list").splitlines() if line.startswith("pt "))
    assert row.split()[1:3] == ["SUCCEEDED", "PYTORCHJOB"]
    # arena's -T picks the jobs of a type: an MPI job beside it, and each read names the mismatch
    seeds_cli.ok("submit", "mpi", "--name", "mp", "--workers", "1", "--", PY, "-c", "pass")
    listed = [line.split()[0] for line in seeds_cli.ok("list", "-T", "pytorchjob").splitlines()[1:]]
    assert listed == ["pt"]
    assert [line.split()[0] for line in seeds_cli.ok("list", "-T", "mpijob").splitlines()[1:]] == ["mp"]
    for args in (["get", "pt"], ["logs", "pt"], ["top", "job", "pt"], ["delete", "pt"]):
        wrong = seeds_cli(*args, "-T", "mpijob")
        assert wrong.returncode == 1 and wrong.stderr.count("\n") == 1, args
        assert wrong.stderr.startswith("error: job 'pt' is of type pytorchjob, not mpijob. To fix: drop -T")
    assert "pt" in seeds_cli.ok("list")  # the refused delete stopped nothing
    assert seeds_cli.ok("get", "pt", "-T", "py").startswith("Name:")
    # an MPI line is an MPI job: refused in one line, nothing written
    refused = seeds_cli("submit", "py", "--name", "ptm", "--workers", "2", "mpirun -np 2 python train.py")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "this is a mpirun line" in refused.stderr and "`submit mpi`" in refused.stderr
    assert "ptm" not in seeds_cli.job_names()


@pytest.mark.parametrize("kind", ["tfjob", "horovod"])
def test_other_job_kinds_point_at_submit_mpi(cli, kind: str) -> None:  # type: ignore[no-untyped-def]
    refused = cli("submit", kind, "--name", "x", "--workers", "2", "--", "python", "train.py")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "use `ringleader submit mpi`" in refused.stderr
    assert not (cli.home / "state.db").exists()


def test_following_a_waiting_job_says_what_it_waits_for(cli) -> None:  # type: ignore[no-untyped-def]
    cli.ok("cluster", "apply", "-f", str(EXAMPLES / "seeds-cluster.yaml"))
    hold = ["--", PY, "-c", "import time; time.sleep(30)"]
    cli.ok("submit", "mpi", "--name", "all", "--workers", "2", "--gpus", "8", *hold)
    cli.ok("submit", "mpi", "--name", "later", "--workers", "1", "--gpus", "8", "--", PY, "-c", "print('ran')")
    import subprocess

    follow = subprocess.Popen(cli.argv("logs", "-f", "later"), env=cli.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        first = follow.stderr.readline() if follow.stderr else ""
    finally:
        follow.kill()
        follow.wait()
    assert first.startswith("job later is PENDING (") and "its log follows once it starts" in first


def _snapshots_until_ctrl_c(cli, args: list[str], separator: str) -> list[str]:  # type: ignore[no-untyped-def]
    """What `ARGS` prints piped, Ctrl-C sent once its second snapshot is out (each is flushed
    whole), however slowly it starts; it must end cleanly on it (exit 0, no traceback)."""
    import os
    import signal
    import subprocess
    import threading

    from waiting import wait_for

    proc = subprocess.Popen(cli.argv(*args), env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout
    assert out is not None
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: os.read(out.fileno(), 65536), b"")),
                              daemon=True)  # fmt: skip
    reader.start()

    def snapshots() -> list[str]:
        return b"".join(chunks).decode().split(separator)

    wait_for(lambda: len(snapshots()) >= 2 and "GPU(Allocated)" in snapshots()[1], what=f"a second snapshot of {args}")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    reader.join(120)
    assert proc.returncode == 0 and b"Traceback" not in err, err
    return snapshots()


def test_top_refreshes_until_ctrl_c(seeds_cli) -> None:  # type: ignore[no-untyped-def]
    """`top node -r` / `top job -r` piped: one snapshot after another, a blank line between;
    Ctrl-C ends it cleanly (exit 0, no traceback)."""
    for args, separator in ((["top", "node", "-r", "0.2"], "\n\n"), (["top", "job", "-r", "0.2"], "\n\nNAME")):
        snapshots = _snapshots_until_ctrl_c(seeds_cli, args, separator)
        assert len(snapshots) >= 2 and "GPU(Allocated)" in snapshots[1]


def test_top_node_addresses_and_gpu_mode(seeds_cli) -> None:  # type: ignore[no-untyped-def]
    seeds_cli.ok("node", "label", "cn-shanghai-173", "gpu-schedule=default")
    rows = {line.split()[0]: line.split() for line in seeds_cli.ok("top", "node").splitlines()[1:4]}
    assert rows["local"][1] == "127.0.0.1" and rows["cn-shanghai-172"][1] == "-"  # emulated here
    assert [r.split()[0] for r in seeds_cli.ok("top", "node", "-m", "t").splitlines()[1:2]] == ["cn-shanghai-172"]
    assert "cn-shanghai-173" in seeds_cli.ok("top", "node", "-m", "e")
    assert "local" in seeds_cli.ok("top", "node", "-m", "n")
    assert "cn-shanghai-173" not in seeds_cli.ok("top", "node", "-m", "t")
    assert seeds_cli("top", "node", "-r", "0").returncode == 2


def test_logs_since_and_since_time(seeds_cli) -> None:  # type: ignore[no-untyped-def]
    """arena's `logs --since 10m` / `--since-time RFC3339`: only lines stamped from then on."""
    seeds_cli.ok("submit", "mpi", "--name", "talk", "--workers", "2", "--gpus", "1", "--", PY, "-c",
                 "print('one'); print('two')")  # fmt: skip
    seeds_cli.ok("logs", "-f", "talk")
    assert seeds_cli.ok("logs", "--since", "10m", "talk") == "one\ntwo\n"
    assert seeds_cli.ok("logs", "--since", "10m", "-t", "1", "talk") == "two\n"
    assert seeds_cli.ok("logs", "--since-time", "2999-01-01T00:00:00Z", "talk") == ""
    stamped = seeds_cli.ok("logs", "-f", "--since-time", "2000-01-01T00:00:00+00:00", "--timestamps", "talk")
    assert [ln.split(" ", 1)[1] for ln in stamped.splitlines()] == ["one", "two"]
    for bad in (["--since", "ten"], ["--since-time", "yesterday"], ["--since-time", "2026-11-24T15:00:00"],
                ["--since", "1m", "--since-time", "2026-11-24T15:00:00Z"]):  # fmt: skip
        refused = seeds_cli("logs", *bad, "talk")
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, (bad, refused.stderr)


def test_lines_since_keeps_unstamped_lines_with_their_stamped_one() -> None:
    from ringleader.jobs.logfiles import lines_since

    text = "2026-11-24T10:00:00Z old\ncontinued\n2026-11-24T11:00:00.123456789Z new\nmore\n"
    cutoff = 1795515600.0  # 2026-11-24T10:20:00Z
    assert "".join(lines_since([text], cutoff, False)) == "new\nmore\n"
    assert "".join(lines_since([text, "2026-11-24T12:00:00Z last\n"], cutoff, True, tail=1)) == (
        "more\n2026-11-24T12:00:00Z last\n")


def test_flags_after_a_quoted_command_are_read_as_arena_reads_them(seeds_cli) -> None:  # type: ignore[no-untyped-def]
    """arena takes the command as one string and reads flags after it."""
    plan = seeds_cli.ok("submit", "mpi", "--name", "dr", "--workers", "2", f"{PY} -c pass", "--dry-run", "--gpus", "1")
    assert plan.startswith("Plan for job dr (dry run") and "2 worker(s) x 1 GPU(s)" in plan  # nothing submitted
    assert "dr" not in seeds_cli.job_names()
    # words after -- or after a command of several words stay the program's
    seeds_cli.ok("submit", "mpi", "--name", "args", "--", PY, "-c", "import sys; print(sys.argv[1:])", "--dry-run")
    seeds_cli.ok("logs", "-f", "args")
    assert seeds_cli.ok("logs", "args") == "['--dry-run']\n"


@pytest.mark.parametrize(("value", "mode"), [("true", "topology"), ("false", "default"), ("yes", "topology")])
def test_a_boolean_flag_with_its_value_as_a_word_of_its_own(seeds_cli, value: str, mode: str) -> None:  # type: ignore[no-untyped-def]
    """`--gputopology true` (a space, as many write arena's boolean flags) is the flag's value,
    never the program `true`."""
    plan = seeds_cli.ok("submit", "mpi", "--name", "gt", "--workers", "2", "--gpus", "1", "--gputopology", value,
                        "--dry-run", "--", PY, "-c", "pass")  # fmt: skip
    assert f"2 worker(s) x 1 GPU(s), policy {mode}\n" in plan, plan


def test_arenas_read_flags(seeds_cli) -> None:  # type: ignore[no-untyped-def]
    """What arena scripts pass to the read commands: -T/--type (a ringleader job is an mpijob),
    get's -g/--gpus, top job's -i/--instance; another job type refused in one line, as the job
    is no job of that type."""
    seeds_cli.ok("submit", "mpi", "--name", "t", "--workers", "2", "--gpus", "1", "--", PY, "-c", "print('hi')")
    seeds_cli.ok("logs", "-f", "t")
    def timeless(out: str) -> str:  # ages and durations move on between two commands (9s, then 10s: wider)
        return re.sub(r" +", " ", re.sub(r"\b\d+[smhd]\b", "", out))

    for args in (["get", "t"], ["list"], ["logs", "t"], ["top", "job", "t"]):
        plain = timeless(seeds_cli.ok(*args))
        assert timeless(seeds_cli.ok(*args, "-T", "mpijob")) == plain == timeless(seeds_cli.ok(*args, "--type", "MPI"))
        refused = seeds_cli(*args, "-T", "tfjob")
        assert refused.returncode == 2 and refused.stdout == "" and refused.stderr.count("\n") == 1
        assert refused.stderr.startswith("error: -T tfjob: ringleader runs MPI and PyTorch jobs (mpijob, "
                                         "pytorchjob) only")  # fmt: skip
    assert timeless(seeds_cli.ok("get", "t", "--gpus")) == timeless(seeds_cli.ok("get", "t", "-g"))
    one = seeds_cli.ok("top", "job", "t", "-i", "t-worker-1")
    assert "t-worker-1" in one and "t-worker-0" not in one
    assert seeds_cli.ok("top", "node", "-o", "wide") == seeds_cli.ok("top", "node")  # arena's default output
    missing = seeds_cli("top", "job", "t", "-i", "nope")
    assert missing.returncode == 1 and "instance 'nope'" in missing.stderr
