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
from ringleader.engines.base import ALL_NAMESPACES, Engine
from ringleader.errors import StateError, UsageError
from ringleader.statefolder import make_private_home, open_file, write_file

# name -> "module:factory"; a factory takes the ringleader home folder and returns an Engine.
ENGINES: dict[str, str] = {
    "embedded": "ringleader.engines.embedded.engine:open_embedded",
    "slurm": "ringleader.engines.slurm:open_slurm",
    "kubernetes": "ringleader.engines.kubernetes.engine:open_kubernetes",
}
DEFAULT = "embedded"
CONFIG = "config.json"
MAX_CONFIG_BYTES = 64 << 10  # it holds one name: anything bigger is not ringleader's

__all__ = ["ALL_NAMESPACES", "DEFAULT", "ENGINES", "Engine", "chosen_engine", "open_engine", "set_default_engine"]


def check_engine(name: str) -> str:
    if name not in ENGINES:
        raise UsageError(f"unknown engine {name!r}", f"use one of {', '.join(sorted(ENGINES))}")
    return name


def _read_config(home: Path) -> object:
    """config.json as JSON, never read through a link (StateError); None where it is missing
    or unreadable."""
    try:
        fd = open_file(home, CONFIG)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        try:
            return json.loads(fh.read(MAX_CONFIG_BYTES))
        except ValueError:
            return None


def default_engine(home: Path) -> str:
    """The persistent default (`ringleader engine use`), else `embedded`."""
    data = _read_config(home)
    name = data.get("engine") if isinstance(data, dict) else None
    return name if isinstance(name, str) and name in ENGINES else DEFAULT


def chosen_engine(home: Path, flag: str | None = None) -> str:
    """--engine, else RINGLEADER_ENGINE, else the persistent default."""
    name = flag or settings.text("RINGLEADER_ENGINE") or default_engine(home)
    return check_engine(name)


def set_default_engine(home: Path, name: str) -> None:
    """Record ``name`` as the folder's default engine: in a state folder checked as every
    command checks it, the file replaced whole, never written through a link."""
    check_engine(name)
    read = _read_config(home)
    data = read if isinstance(read, dict) else {}
    data["engine"] = name
    try:
        make_private_home(home)
        write_file(home, CONFIG, json.dumps(data).encode())
    except OSError as exc:
        raise StateError(f"cannot write {home / CONFIG} ({exc.strerror or exc})",
                         "free some space, or make the folder writable, then retry") from None  # fmt: skip


def open_engine(name: str, home: Path, readonly: bool = False) -> Engine:
    module, _, factory = ENGINES[check_engine(name)].partition(":")
    engine: Engine = getattr(importlib.import_module(module), factory)(home, readonly)
    return engine
