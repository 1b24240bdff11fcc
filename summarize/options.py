"""Parameter types the commands share: each refuses a value out of its range with the range."""

from __future__ import annotations

import math

import click

DAY_S = 86_400
LATEST = click.IntRange(1, 10_000)  # how many batches a listing shows


class Seconds(click.ParamType):
    """A number of seconds from 0 to `most_s` (not NaN, not infinite)."""

    name = "seconds"

    def __init__(self, most_s: float):
        self.most_s = most_s

    def convert(self, value, param, ctx) -> float:
        if isinstance(value, float):
            return value
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not (math.isfinite(seconds) and 0 <= seconds <= self.most_s):
            self.fail(f"{value!r} is not from 0 to {self.most_s:,.0f} seconds", param, ctx)
        return seconds
