"""The names arena users type: `ls`, `log`, `del`, `submit mpijob|mj`, `version`, `completion`,
`logs -t`, `prune -s`; arena's other job kinds pointed at `submit mpi` in one line."""

from __future__ import annotations

import sys

import pytest

from cli.conftest import EXAMPLES
from ringleader import __version__

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


@pytest.mark.parametrize("kind", ["pytorchjob", "tfjob", "horovod"])
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


def test_top_refreshes_until_ctrl_c(seeds_cli) -> None:  # type: ignore[no-untyped-def]
    """`top node -r` / `top job -r` piped: one snapshot after another, a blank line between;
    Ctrl-C ends it cleanly (exit 0, no traceback)."""
    import signal
    import subprocess
    import time

    for args in (["top", "node", "-r", "0.2"], ["top", "job", "-r", "0.2"]):
        proc = subprocess.Popen(seeds_cli.argv(*args), env=seeds_cli.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        time.sleep(2.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "Traceback" not in err, err
        snapshots = out.split("\n\n" if args[1] == "node" else "\n\nNAME")
        assert len(snapshots) >= 2 and "GPU(Allocated)" in snapshots[1], out


def test_top_node_addresses_and_gpu_mode(seeds_cli) -> None:  # type: ignore[no-untyped-def]
    seeds_cli.ok("node", "label", "cn-shanghai-173", "gpu-schedule=default")
    rows = {line.split()[0]: line.split() for line in seeds_cli.ok("top", "node").splitlines()[1:4]}
    assert rows["local"][1] == "127.0.0.1" and rows["cn-shanghai-172"][1] == "-"  # emulated here
    assert [r.split()[0] for r in seeds_cli.ok("top", "node", "-m", "t").splitlines()[1:2]] == ["cn-shanghai-172"]
    assert "cn-shanghai-173" in seeds_cli.ok("top", "node", "-m", "e")
    assert "local" in seeds_cli.ok("top", "node", "-m", "n")
    assert "cn-shanghai-173" not in seeds_cli.ok("top", "node", "-m", "t")
    assert seeds_cli("top", "node", "-r", "0").returncode == 2
