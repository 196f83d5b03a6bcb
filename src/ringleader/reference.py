"""Read access to data/reference.toml, the one file of constants taken from elsewhere."""

from __future__ import annotations

import functools
import tomllib
from importlib import resources
from typing import Any


@functools.cache
def reference() -> dict[str, Any]:
    """The parsed reference data; each entry sits beside its ``*_source``/``source`` key."""
    text = resources.files("ringleader").joinpath("data/reference.toml").read_text()
    return tomllib.loads(text)
