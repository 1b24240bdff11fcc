"""The worker's writes on a thread of their own: the engine steps on while rows are written.

The drain thread hands over a wave of finished documents and goes back to the
engine; this thread writes the wave in one transaction (the recorder retries a
database that went away) and reports back through the drain's intake, where
the drain resolves each document's ticket, so a chunk is acknowledged only
once its rows are committed. While one wave is written the next one gathers,
so the slower the database, the larger each transaction.

Texts of summarized documents are dropped (core/retention.py) when no wave
waits, a step at a time, so dropping them never holds up a wave: with a GPU the
database has time to spare between waves; when the database is what limits the
worker, they are dropped once the queue runs dry, or whenever more than
DROP_BACKLOG wait (what the worker remembers stays bounded).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from worker.recorder import Recorder
from worker.work import Outcome

log = logging.getLogger(__name__)

FLUSH_ROWS = 1024  # write at least this often, whatever the interval
DROP_STEP = 1000  # texts dropped in one transaction
DROP_BACKLOG = 50_000  # more waiting than this: drop a step even while waves wait


@dataclass(frozen=True)
class Written:
    """A wave of outcomes, committed (or the error that stopped it: the worker must exit)."""

    outcomes: list[Outcome]
    error: BaseException | None = None


class Writes:
    def __init__(
        self, recorder: Recorder, report: Callable[[Written], None], flush_interval_s: float
    ):
        self._recorder = recorder
        self._report = report
        self.flush_interval_s = flush_interval_s
        self._gathered: list[Outcome] = []  # the next wave: finished, not yet handed over
        self._gathered_hashes: list[str] = []
        self._first_gathered_at = 0.0
        self._waves: queue.SimpleQueue[tuple[list[Outcome], list[str]] | None] = queue.SimpleQueue()
        self._hashes_to_drop: list[str] = []  # hashes of summarized documents whose texts may go
        self._thread = threading.Thread(target=self._run, name="writes", daemon=True)
        self.pending = 0  # waves handed over and not yet reported back (the drain thread's count)

    def start(self) -> None:
        self._thread.start()

    # -- called from the drain thread ------------------------------------------------------

    def add(self, outcome: Outcome, content_hash: str | None = None) -> None:
        """Gather an outcome into the next wave; `content_hash`: that of a summarized
        document, whose text may be dropped once the wave is written."""
        if not self._gathered:
            self._first_gathered_at = time.monotonic()
        self._gathered.append(outcome)
        if content_hash is not None:
            self._gathered_hashes.append(content_hash)

    def due(self, hurry: bool) -> bool:
        """Whether to hand the gathered wave over now: one wave written and one waiting at
        most, and the wave is full, old enough, or `hurry` (nothing else will join it soon)."""
        return (
            bool(self._gathered)
            and self.pending < 2
            and (
                hurry
                or len(self._gathered) >= FLUSH_ROWS
                or time.monotonic() - self._first_gathered_at >= self.flush_interval_s
            )
        )

    def flush(self) -> None:
        """Hand the gathered wave to the writes thread; `report` gets it back once committed."""
        if self._gathered:
            wave, texts = self._gathered, self._gathered_hashes
            self._gathered, self._gathered_hashes = [], []
            self.pending += 1
            self._waves.put((wave, texts))

    @property
    def gathered(self) -> bool:
        return bool(self._gathered)

    def reported(self) -> None:
        """The drain thread took a report back."""
        self.pending -= 1

    def stop(self, timeout: float | None = None) -> None:
        self._waves.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            try:
                item = self._waves.get(block=not self._hashes_to_drop)
            except queue.Empty:  # nothing to write: drop a step of texts, then look again
                self._drop_texts()
                continue
            if item is None:
                break
            wave, texts = item
            try:
                self._recorder.record(wave)
            except BaseException as exc:  # noqa: BLE001 - the drain thread decides what it means
                self._report(Written(wave, exc))
                continue
            if not self._recorder.keep_texts:  # SUMMARIZE_KEEP_TEXTS: nothing to drop
                self._hashes_to_drop += texts
            self._report(Written(wave))
            if len(self._hashes_to_drop) > DROP_BACKLOG:
                self._drop_texts()
        while self._hashes_to_drop:
            self._drop_texts()

    def _drop_texts(self) -> None:
        step, self._hashes_to_drop = (
            self._hashes_to_drop[:DROP_STEP],
            self._hashes_to_drop[DROP_STEP:],
        )
        try:
            self._recorder.drop_texts(step)
        except Exception as exc:  # noqa: BLE001 - the texts stay; `summarize purge` removes them
            log.warning("could not drop %d document texts (they stay): %s", len(step), exc)
