"""Which waiting documents the engine takes next: the most urgent batch's, then the oldest,
as many as it has room for; suspects apart.

A document that was taken on before and never finished is a suspect: the worker
may have died because of it. Suspects run apart from everyone else, in small
groups and finally alone, so a poison document is isolated and failed after
`max_attempts`, and the documents that happened to share its engine batch
succeed.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from core.messages import NORMAL
from core.settings import PRIORITY_NAMES

SUSPECT_GROUP = 16  # suspects on an attempt before their last run in groups of this size


class Admission:
    def __init__(self, max_attempts: int):
        self.max_attempts = max_attempts
        # keys not yet claimed, by urgency (core/messages.urgency), each in arrival order
        self._waiting: list[dict[str, None]] = [{} for _ in PRIORITY_NAMES]
        self._tried: dict[str, int] = {}  # waiting suspects: their earlier attempts
        self._apart = False  # suspects are running: admit nobody else until they finish

    def __bool__(self) -> bool:
        return any(self._waiting)

    def wait(self, keys: list[str], urgency: int = NORMAL) -> None:
        """New documents: they start with the next wave, after the more urgent ones waiting
        and the ones of their urgency that came before them."""
        self._waiting[urgency].update(dict.fromkeys(keys))

    def suspect(self, key: str, attempts: int) -> None:
        """A claim showed the document was taken on `attempts` times before: it waits to run
        apart."""
        self._waiting[NORMAL][key] = None
        self._tried[key] = attempts

    def next(self, engine_busy: bool, room: int) -> tuple[list[str], bool] | None:
        """The keys to start now, and whether they run apart; None when nobody may start yet.

        Up to `room` join the running engine, the most urgent first, then the oldest;
        suspects wait for it to empty, then run alone (a group of them, or one on its last
        attempt)."""
        if self._apart:
            if engine_busy:
                return None
            self._apart = False
        if not self._tried:  # no suspect waits (each one waits in _waiting too)
            return self._take(list(itertools.islice(self._queued(), room))), False
        if engine_busy:
            return None  # let the running batch finish first; the suspects run alone after it
        suspects = [k for k in self._queued() if k in self._tried]
        last_try = [k for k in suspects if self._tried[k] + 1 >= self.max_attempts]
        self._apart = True
        return self._take(last_try[:1] or suspects[:SUSPECT_GROUP]), True

    def take_all(self) -> list[str]:
        """Everything waiting, to hand back."""
        return self._take(list(self._queued()))

    def _queued(self) -> Iterator[str]:
        return itertools.chain.from_iterable(self._waiting)

    def _take(self, keys: list[str]) -> list[str]:
        for key in keys:
            for lane in self._waiting:
                lane.pop(key, None)
            self._tried.pop(key, None)
        return keys
