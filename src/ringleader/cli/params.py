"""Option types every command group shares: numbers refused outside a range that means something
(NaN and infinity included: click's FloatRange lets NaN through, every comparison with it being
false), so a typo is one usage line, never a traceback or a run that does not end."""

from __future__ import annotations

import math
from typing import Any

import click


class FiniteFloat(click.ParamType):
    """A float within [low, high] (``low_open``: above ``low``)."""

    name = "float"

    def __init__(self, low: float, high: float = math.inf, low_open: bool = False) -> None:
        self.low, self.high, self.low_open = low, high, low_open

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        above = number > self.low if self.low_open else number >= self.low
        if not (math.isfinite(number) and above and number <= self.high):
            side = ">" if self.low_open else ">="
            upper = "" if self.high == math.inf else f" and <= {self.high:g}"
            self.fail(f"{value!r} is not a finite number {side} {self.low:g}{upper}", param, ctx)
        return number


class PlainText(click.ParamType):
    """Free text a person reads later (a cordon's reason): at most ``max_length`` characters, no
    control character (a table would show it, a terminal would obey it)."""

    name = "text"

    def __init__(self, max_length: int) -> None:
        self.max_length = max_length

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if len(text) > self.max_length:
            self.fail(f"{len(text)} characters, more than {self.max_length}: say it shorter", param, ctx)
        if not text.isprintable():
            self.fail(f"{text[:40]!r} holds a control character: write plain text", param, ctx)
        return text


def count(low: int, high: int) -> click.IntRange:
    """A whole number within [low, high]: a size, a count, a port."""
    return click.IntRange(low, high)


DAY_S = 86400.0
BACKENDS = ("gloo", "mpi", "nccl")
