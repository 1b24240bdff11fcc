"""Parameter types the commands share: each refuses a value out of its range with the range."""

from __future__ import annotations

import math

import click

DAY_S = 86_400


class Whole(click.ParamType):
    """A whole number from `low` to `high`."""

    name = "integer"

    def __init__(self, low: int, high: int):
        self.low, self.high = low, high

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = int(str(value).strip())
            except ValueError:
                number = None
        if number is None or not self.low <= number <= self.high:
            self.fail(
                f"{value!r} is not a whole number from {self.low} to {self.high:,}", param, ctx
            )
        return number


LATEST = Whole(1, 10_000)  # how many batches a listing shows


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
