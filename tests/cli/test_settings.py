"""Every RINGLEADER_* setting is checked in one place (ringleader.settings): a bad value is one
line naming the variable and what it takes (exit 2) before any command runs, never a traceback
from deep inside one, never silently replaced by the default."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ringleader import settings
from ringleader.errors import UsageError
from ringleader.jobs.queues import queue_config
from ringleader.scheduler.reorder import DEFAULT_REORDER

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "ringleader"

BAD = [
    ("RINGLEADER_LOCK_TIMEOUT_S", "inf"),
    ("RINGLEADER_LOCK_TIMEOUT_S", "1e308"),
    ("RINGLEADER_LOCK_TIMEOUT_S", "nan"),
    ("RINGLEADER_LOCK_TIMEOUT_S", "abc"),
    ("RINGLEADER_LOCK_TIMEOUT_S", "0"),
    ("RINGLEADER_GRACE_S", "-5"),
    ("RINGLEADER_GRACE_S", "inf"),
    ("RINGLEADER_GRACE_S", "five"),
    ("RINGLEADER_MAX_PROCS", "0"),
    ("RINGLEADER_MAX_PROCS", "1e9"),
    ("RINGLEADER_MAX_PROCS", "9" * 25),
    ("RINGLEADER_ENGINE", "bogus"),
    ("RINGLEADER_DEBUG", "yes"),
    ("RINGLEADER_CRASH_AT", "nowhere"),
    ("RINGLEADER_SLURM_PARTITION", "a b"),
    ("RINGLEADER_KUBE_SERVER", "not-a-url"),
    ("RINGLEADER_KUBE_NAMESPACE", "Bad_NS"),
    ("RINGLEADER_KUBE_CONTEXT", "has space"),
    ("RINGLEADER_BENCH_CORRUPT", "x"),
    ("RINGLEADER_HOME", "a\nb"),
    ("RINGLEADER_PREEMPT_MIN_RUN_S", "0"),
    ("RINGLEADER_PREEMPT_MIN_RUN_S", "30m"),
    ("RINGLEADER_PREEMPT_MIN_RUN_S", "1e9"),
]


def run(tmp_path: Path, name: str, value: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RINGLEADER_HOME": str(tmp_path / "home")}
    env.pop("RINGLEADER_DEBUG", None)
    env[name] = value
    return subprocess.run([sys.executable, "-m", "ringleader.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=60, cwd=REPO)  # fmt: skip


@pytest.mark.parametrize(("name", "value"), BAD, ids=[f"{n}={v!r}" for n, v in BAD])
def test_a_bad_setting_is_one_line_naming_it_and_its_range(tmp_path: Path, name: str, value: str) -> None:
    done = run(tmp_path, name, value, "submit", "mpi", "--name", "j", "--", "true")
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"error: {name}="), done.stderr
    assert f"it takes {settings.SETTINGS[name].describe()}. To fix: set {name} to" in done.stderr
    assert not (tmp_path / "home").exists() or name == "RINGLEADER_HOME"  # nothing created


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("RINGLEADER_LOCK_TIMEOUT_S", "0.5", 0.5),
    ("RINGLEADER_LOCK_TIMEOUT_S", "", 30.0),
    ("RINGLEADER_GRACE_S", "0", 0.0),
    ("RINGLEADER_MAX_PROCS", "12", 12),
    ("RINGLEADER_MAX_PROCS", "", None),
    ("RINGLEADER_KUBE_NAMESPACE", "team-a", "team-a"),
    ("RINGLEADER_KUBE_SERVER", "http://127.0.0.1:8001", "http://127.0.0.1:8001"),
    ("RINGLEADER_DEBUG", "", "0"),
    ("RINGLEADER_PREEMPT_MIN_RUN_S", "", 1800.0),
    ("RINGLEADER_PREEMPT_MIN_RUN_S", "300", 300.0),
])  # fmt: skip
def test_good_settings_read_as_their_values(name: str, value: str, expected: object) -> None:
    read = {"number": settings.number, "integer": settings.integer, "text": settings.text}
    assert read[settings.SETTINGS[name].kind](name, {name: value}) == expected


def test_the_python_api_refuses_what_the_command_refuses() -> None:
    with pytest.raises(UsageError, match="RINGLEADER_LOCK_TIMEOUT_S='inf' is not valid"):
        settings.number("RINGLEADER_LOCK_TIMEOUT_S", {"RINGLEADER_LOCK_TIMEOUT_S": "inf"})


def test_every_setting_read_in_the_source_is_in_the_table_and_read_through_it() -> None:
    """No RINGLEADER_* variable is read from the environment anywhere but ringleader.settings."""
    direct = re.compile(r"environ(?:\.get\(|\[)\s*[\"']RINGLEADER_")
    offenders = [f"{p.relative_to(SRC)}:{i}" for p in SRC.rglob("*.py") if p.name != "settings.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1) if direct.search(line)]  # fmt: skip
    assert not offenders, offenders
    read = re.compile(r"settings\.\w+\(\s*[\"'](RINGLEADER_\w+)")
    named = {m for p in SRC.rglob("*.py") for m in read.findall(p.read_text())}
    assert named <= set(settings.SETTINGS), named - set(settings.SETTINGS)


def test_the_engine_choices_are_the_registry_s() -> None:
    from ringleader.engines import ENGINES

    assert set(settings.ENGINE_NAMES) == set(ENGINES)


def test_the_minimum_run_before_preemption_reaches_the_queues_knobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """RINGLEADER_PREEMPT_MIN_RUN_S is what every engine's queue pass uses as the least run
    before a job may be stopped for order or fair share; unset, the scheduler's own default."""
    assert settings.SETTINGS["RINGLEADER_PREEMPT_MIN_RUN_S"].default == DEFAULT_REORDER.min_run_s
    monkeypatch.delenv("RINGLEADER_PREEMPT_MIN_RUN_S", raising=False)
    assert queue_config().reorder == DEFAULT_REORDER
    monkeypatch.setenv("RINGLEADER_PREEMPT_MIN_RUN_S", "120")
    assert queue_config().reorder.min_run_s == 120.0
