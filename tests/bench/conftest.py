"""Helpers for the bench tests: run the real CLI in a subprocess (real ranks, real files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

PY = sys.executable
# How long a bench may take: the runs are tiny, but real ranks on a 2-core machine that other test
# files load too can take minutes. A limit ends a hang, it does not time the bench (BENCHMARKS.md does).
TIMEOUT = 600
LONG_TIMEOUT = 900  # a scaling or pipeline study: several benches in a row


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = TIMEOUT,
        cwd: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    full = dict(os.environ, **(env or {}))
    return subprocess.run([PY, "-m", "ringleader.cli.main", *args], capture_output=True,
                          text=True, timeout=timeout, env=full, check=False, cwd=cwd)  # fmt: skip


def cli_json(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = cli(*args, "-o", "json", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dict(json.loads(proc.stdout))


@pytest.fixture(scope="session")
def jpeg_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 real JPEGs in 3 classes, plus one corrupt file that the loader must skip."""
    from ringleader.bench.data import synth

    root = tmp_path_factory.mktemp("jpegs")
    synth(str(root), images=24, size=48, classes=3, seed=1)
    good = next((root / "class_000").glob("*.jpg")).read_bytes()
    (root / "class_001" / "broken.jpg").write_bytes(good[: len(good) // 3])
    return root
