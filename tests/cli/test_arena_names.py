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
