"""Engines: where a placed gang's ranks run. One package each; chosen by name; imported lazily.

    embedded    SQLite state on this machine, no server; ranks on this host, or on ssh hosts
                (nodes with an `address`) through Open MPI's own ssh launcher
    slurm       a Slurm cluster: ringleader places, Slurm runs exactly the chosen nodes and GPUs
    kubernetes  MPIJobs scheduled by ringleader's secondary scheduler

The default is `embedded`; `ringleader engine use NAME` changes it (kept in the home folder),
RINGLEADER_ENGINE or a command's `--engine` override it.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

from ringleader import settings
from ringleader.engines.base import Engine
from ringleader.errors import UsageError

# name -> "module:factory"; a factory takes the ringleader home folder and returns an Engine.
ENGINES: dict[str, str] = {
    "embedded": "ringleader.engines.embedded.engine:open_embedded",
    "slurm": "ringleader.engines.slurm:open_slurm",
    "kubernetes": "ringleader.engines.kubernetes.engine:open_kubernetes",
}
DEFAULT = "embedded"
CONFIG = "config.json"

__all__ = ["DEFAULT", "ENGINES", "Engine", "chosen_engine", "open_engine", "set_default_engine"]


def check_engine(name: str) -> str:
    if name not in ENGINES:
        raise UsageError(f"unknown engine {name!r}", f"use one of {', '.join(sorted(ENGINES))}")
    return name


def _config_path(home: Path) -> Path:
    return home / CONFIG


def default_engine(home: Path) -> str:
    """The persistent default (`ringleader engine use`), else `embedded`."""
    try:
        data = json.loads(_config_path(home).read_text())
    except (OSError, ValueError):
        return DEFAULT
    name = data.get("engine") if isinstance(data, dict) else None
    return name if isinstance(name, str) and name in ENGINES else DEFAULT


def chosen_engine(home: Path, flag: str | None = None) -> str:
    """--engine, else RINGLEADER_ENGINE, else the persistent default."""
    name = flag or settings.text("RINGLEADER_ENGINE") or default_engine(home)
    return check_engine(name)


def set_default_engine(home: Path, name: str) -> None:
    check_engine(name)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = _config_path(home)
    try:
        data = json.loads(path.read_text())
        data = data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        data = {}
    data["engine"] = name
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def open_engine(name: str, home: Path, readonly: bool = False) -> Engine:
    module, _, factory = ENGINES[check_engine(name)].partition(":")
    engine: Engine = getattr(importlib.import_module(module), factory)(home, readonly)
    return engine
