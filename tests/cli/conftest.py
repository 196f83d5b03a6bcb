"""Fixtures for CLI tests: the real `ringleader` command in a subprocess, a fresh home each."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from statedb import dump_db

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


class Cli:
    """Runs `python -m ringleader.cli.main ARGS` with RINGLEADER_HOME set to ``home``."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {**os.environ, "RINGLEADER_HOME": str(home), "RINGLEADER_GRACE_S": "2"}
        self.env.pop("RINGLEADER_DEBUG", None)

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "ringleader.cli.main", *args]

    def __call__(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), env=self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=REPO)  # fmt: skip

    def ok(self, *args: str) -> str:
        out = self(*args)
        assert out.returncode == 0, f"{args}: rc={out.returncode}\n{out.stdout}\n{out.stderr}"
        return out.stdout

    def dump(self) -> list[str]:
        return dump_db(self.home)

    def job_names(self) -> list[str]:
        """The jobs in the state, read in this process: for a check that nothing was submitted,
        where a `list` would cost a start of the command."""
        from ringleader.engines.embedded.engine import Runtime

        with Runtime.open(self.home, readonly=True) as rt:
            return [job.name for job in rt.list_jobs()]


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    runner = Cli(tmp_path / "rl-home")
    yield runner
    if (runner.home / "state.db").exists():
        from ringleader.engines.embedded.engine import Runtime

        rt = Runtime.open(runner.home)
        live = [j.name for j in rt.list_jobs() if not j.status.is_terminal()]
        if live:
            rt.delete(live)


@pytest.fixture
def seeds_cli(cli: Cli) -> Cli:
    # Declared in this process, not by `ringleader cluster apply`: one start of the command less
    # per test; the tests about that command run it themselves.
    apply_seeds_cluster(cli.home)
    return cli


def apply_seeds_cluster(home: Path) -> None:
    from ringleader.engines.embedded.engine import Runtime

    rt = Runtime.open(home)
    try:
        rt.apply_cluster(EXAMPLES / "seeds-cluster.yaml")
    finally:
        rt.close()


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str], Path]:
    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return _write


class InProcess:
    """The same click commands called in this process (for rendering checks: no start-up cost)."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def ok(self, *args: str) -> str:
        from click.testing import CliRunner

        from ringleader.cli.main import cli as root

        result = CliRunner().invoke(root, list(args), env={"RINGLEADER_HOME": str(self.home)})
        assert result.exit_code == 0, f"{args}: {result.output}\n{result.exception!r}"
        return result.stdout


@pytest.fixture
def seeds_inproc(tmp_path: Path) -> InProcess:
    home = tmp_path / "rl-home-inproc"
    apply_seeds_cluster(home)
    return InProcess(home)
