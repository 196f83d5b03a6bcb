"""The machine's load beside every figure: on a shared or busy machine it explains odd numbers."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any


def machine_load() -> dict[str, Any]:
    """The load averages and core count beside each figure: a busy machine explains odd ones."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:  # not available on this platform
        one = five = fifteen = float("nan")
    at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return {"at": at, "cpus": os.cpu_count() or 1, "load_1m": one, "load_5m": five, "load_15m": fifteen}


def load_text(load: dict[str, Any]) -> str:
    return (f"load average {load['load_1m']:.2f} {load['load_5m']:.2f} {load['load_15m']:.2f} "
            f"on {load['cpus']} cores at {load['at']}")
