"""Who waits on which document: each chunk message's future, settled document by document.

A chunk's future resolves once every document in it has settled: its rows were
written (an `Outcome`), or it left the worker without a row written for it (a
`Signal`). Celery acknowledges the chunk's message only then.
"""

from __future__ import annotations

import enum
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass

from core.messages import NORMAL
from worker.work import Outcome


class Signal(enum.Enum):
    """How a document left the worker without a row written for it."""

    SKIPPED = "skipped"  # nothing to run: summarized already (delivered twice) or cancelled
    HANDED_BACK = "handed back"  # the worker is stopping: the queue delivers it again


Settled = Outcome | Signal


@dataclass(eq=False)
class Chunk:
    """A message's documents: one future for all of them, resolved once each has settled."""

    keys: list[str]
    delivery_tag: str | None
    urgency: int  # its batch's priority (core/messages.urgency): the more urgent start first
    future: Future
    settled: list[Settled | None]
    left: int

    @classmethod
    def of(cls, keys: list[str], delivery_tag: str | None, urgency: int = NORMAL) -> Chunk:
        chunk = cls(list(keys), delivery_tag, urgency, Future(), [None] * len(keys), len(keys))
        if not keys:
            chunk.future.set_result([])
        return chunk

    def settle(self, index: int, settled: Settled) -> None:
        self.settled[index] = settled
        self.left -= 1
        if not self.left:
            self.future.set_result(self.settled)


class Tickets:
    """Every document in hand, with the chunks waiting on it (a key delivered twice has two)."""

    def __init__(self) -> None:
        self._by_key: dict[str, list[tuple[Chunk, int]]] = {}
        self._held: Counter[str | None] = Counter()  # delivery tag -> its documents in hand

    def __bool__(self) -> bool:
        return bool(self._by_key)

    def __len__(self) -> int:
        """Documents in hand (read from another thread for the metrics: a dict's len is safe)."""
        return len(self._by_key)

    def hold(self, chunk: Chunk) -> list[str]:
        """Take a chunk's documents in hand; returns the keys that were not in hand already."""
        new = []
        for index, key in enumerate(chunk.keys):
            waiting = self._by_key.get(key)
            if waiting is None:
                self._by_key[key] = [(chunk, index)]
                new.append(key)
            else:  # a second delivery of a key in hand just waits for the first
                waiting.append((chunk, index))
        self._held[chunk.delivery_tag] += len(chunk.keys)
        return new

    def settle(self, key: str, settled: Settled) -> None:
        held = self._held
        for chunk, index in self._by_key.pop(key, ()):
            tag = chunk.delivery_tag
            held[tag] -= 1
            if not held[tag]:
                del held[tag]
            chunk.settle(index, settled)

    @property
    def held(self) -> frozenset[str]:
        """Delivery tags of the messages in hand, for the leases (read from another thread)."""
        while True:
            try:
                return frozenset(tag for tag in list(self._held) if tag)
            except RuntimeError:  # the counter changed while we copied it
                continue
