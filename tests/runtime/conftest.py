"""Fixtures for runtime tests: a fresh RINGLEADER_HOME per test, clusters, polling helpers.

Every test gets its own state folder; jobs still running at the end are deleted (their
processes stopped) so no test leaves processes behind.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import JobSpec, Runtime
from statedb import dump_db
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
PY = sys.executable


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "rl-home"
    monkeypatch.setenv("RINGLEADER_HOME", str(path))
    monkeypatch.setenv("RINGLEADER_GRACE_S", "2")  # supervisors inherit it: quick SIGKILL
    return path


@pytest.fixture
def rt(home: Path) -> Iterator[Runtime]:
    runtime = Runtime.open(home)
    yield runtime
    runtime = Runtime.open(home)
    live = [j.name for j in runtime.list_jobs() if not j.status.is_terminal()]
    if live:
        runtime.delete(live)
    runtime.close()


@pytest.fixture
def cluster_file(tmp_path: Path) -> Callable[[str], Path]:
    """Write a cluster YAML from its text and return its path."""

    def write(text: str) -> Path:
        path = tmp_path / f"cluster-{time.monotonic_ns()}.yaml"
        path.write_text(text)
        return path

    return write


@pytest.fixture
def seeds(rt: Runtime) -> Runtime:
    """The seeds' cluster: 2 emulated nodes x 8 V100 hybrid cube mesh, 25 Gb/s."""
    rt.apply_cluster(EXAMPLES / "seeds-cluster.yaml")
    return rt


@pytest.fixture
def small(rt: Runtime, cluster_file: Callable[[str], Path]) -> Runtime:
    """One emulated 4-GPU node: room for few jobs at a time."""
    rt.apply_cluster(cluster_file("nodes:\n  - name: box\n    preset: pcie-4gpu-workstation\n    emulated: true\n"))
    return rt


def py(code: str) -> list[str]:
    """argv running a Python snippet with the test interpreter (never through a shell)."""
    return [PY, "-c", code]


def spec(name: str, command: list[str], workers: int = 1, gpus: int = 1, **kw: object) -> JobSpec:
    return JobSpec(name=name, workers=workers, gpus_per_worker=gpus, command=command, **kw)





def waiting_rank(release: Path) -> str:
    """A rank's Python program: prints `up`, then runs until ``release`` exists."""
    return f"import os, time\nprint('up', flush=True)\nwhile not os.path.exists({str(release)!r}): time.sleep(0.05)"


class Helpers:
    """The helpers above, as a fixture (test modules cannot import conftest under importlib)."""

    PY = PY
    EXAMPLES = EXAMPLES
    py = staticmethod(py)
    spec = staticmethod(spec)
    wait_for = staticmethod(wait_for)
    waiting_rank = staticmethod(waiting_rank)
    dump_db = staticmethod(dump_db)


@pytest.fixture
def h() -> type[Helpers]:
    return Helpers
