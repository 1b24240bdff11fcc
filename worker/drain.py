"""The loop that owns the engine: admit documents as they arrive, record results in bulk.

Celery hands each chunk message to a thread of the worker's pool; that thread
calls `Drain.summarize_all(keys)` and waits for every document of the chunk. The
drain thread gathers every waiting document, claims them in one transaction,
adds their requests to the running engine, and steps it. Finished documents are
written together, in one transaction, at most every `flush_interval_s`, by the
writes thread (worker/writes.py) while the engine steps on; each document's
outcome is set once its wave is committed, and once all of a chunk's are, the
chunk's future resolves and Celery acknowledges its message. The engine is
never left to drain while messages wait, nor while rows are written: new
requests join the running batch between steps.

A document that was taken on before and never finished is a suspect: the worker
may have died because of it. Suspects run apart from everyone else, in small
groups and finally alone, so a poison document is isolated and failed after
`max_attempts`, and the documents that happened to share its engine batch
succeed.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import threading
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass

from jobs.settings import Settings
from worker import faults
from worker.engine import Engine, Finished
from worker.parts import DocumentTooLong, Request, Work
from worker.recorder import Claim, Outcome, Recorder
from worker.writes import Writes, Written

log = logging.getLogger(__name__)

EXIT_ENGINE_FAILED = 70  # the worker exits so its unacknowledged messages are delivered again
FLUSH_ROWS = 1024  # write at least this often, whatever the interval
GATHER_S = 0.005  # when the engine is idle, wait this long for more documents before starting
SUSPECT_GROUP = 16  # suspects on an attempt before their last run in groups of this size


@dataclass(eq=False)
class Chunk:
    """A message's documents: one future for all of them, resolved once each has an outcome."""

    keys: list[str]
    delivery_tag: str | None
    future: Future
    outcomes: list[Outcome | None]
    left: int

    def resolve(self, index: int, outcome: Outcome) -> None:
        self.outcomes[index] = outcome
        self.left -= 1
        if not self.left:
            self.future.set_result(self.outcomes)


Ticket = tuple[Chunk, int]  # a document's place in the chunk that brought it


def retry_delay_s(attempts: int) -> float:
    """Backoff before trying a failed document again: 5 s, 15 s, then 30 s."""
    return float(min(30, 5 * 3 ** max(attempts - 1, 0)))


class Drain:
    def __init__(self, engine: Engine, recorder: Recorder, settings: Settings, *, on_fatal=None):
        self.engine = engine
        self.recorder = recorder
        self.model = settings.model_name
        self.max_attempts = settings.max_attempts
        self.flush_interval_s = settings.flush_interval_s
        self.on_fatal = on_fatal or _exit_process
        self._intake: queue.SimpleQueue[Chunk | Written] = queue.SimpleQueue()
        self._writes = Writes(recorder, self._intake.put)
        self._tickets: dict[str, list[Ticket]] = {}  # by key: everyone waiting on a document
        self._waiting: dict[str, None] = {}  # keys not yet claimed, in arrival order
        self._tried: dict[str, int] = {}  # waiting suspects: their earlier attempts
        self._claims: dict[str, Claim] = {}  # by key: documents in the engine
        self._requests: dict[str, Work] = {}  # by engine request id
        self._done: list[Outcome] = []  # finished, not yet written
        self._first_done_at = 0.0
        self._exclusive = False  # suspects are running: admit nobody else
        self._closing_at: float | None = None  # set by begin_shutdown: hand back by then
        self._ids = itertools.count()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drain", daemon=True)
        self._held: Counter[str] = Counter()  # delivery tag -> documents of it in hand
        self.admitted = 0
        self.recorded = 0

    # -- called from other threads ----------------------------------------------------------

    def summarize(self, key: str, delivery_tag: str | None = None) -> Future:
        """Queue one document for the engine; the future resolves once its rows are written."""
        one: Future = Future()
        chunk = self.summarize_all([key], delivery_tag)
        chunk.add_done_callback(lambda done: one.set_result(done.result()[0]))
        return one

    def summarize_all(self, keys: list[str], delivery_tag: str | None = None) -> Future:
        """Queue a chunk's documents; the future resolves to their outcomes, in the keys' order,
        once every one of them is written (or handed back)."""
        chunk = Chunk(list(keys), delivery_tag, Future(), [None] * len(keys), len(keys))
        if not keys:
            chunk.future.set_result([])
        else:
            self._intake.put(chunk)
        return chunk.future

    @property
    def held(self) -> frozenset[str]:
        """Delivery tags of the messages we hold, for the leases (read from another thread)."""
        while True:
            try:
                return frozenset(tag for tag in list(self._held) if tag)
            except RuntimeError:  # the counter changed while we copied it
                continue

    @property
    def claimed(self) -> list[str]:
        """Keys of the documents this worker is running, for their row leases (another thread)."""
        while True:
            try:
                return list(self._claims)
            except RuntimeError:  # the dict changed while we copied it
                continue

    def idle(self) -> bool:
        return self._intake.empty() and not self._tickets

    def start(self) -> None:
        self._writes.start()
        self._thread.start()

    def begin_shutdown(self, grace_s: float) -> None:
        """Hand back what has not started; finish what runs within `grace_s`, hand back the rest."""
        self._closing_at = time.monotonic() + grace_s

    def stop(self, timeout: float | None = None) -> None:
        """End the loop once nothing is in hand, and shut the engine down."""
        self._stop.set()
        self._thread.join(timeout)
        self._writes.stop(timeout)
        self.engine.close()

    # -- the drain thread -------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                busy = self.engine.unfinished() > 0
                ready = self._waiting or (self._done and self._writes.pending < 2)
                self._receive(self._take(wait_s=0.0 if busy or ready else 0.2))
                if self._closing_at is not None:
                    self._hand_back()
                elif self._waiting:
                    self._admit()
                if self.engine.unfinished():
                    for finished in self.engine.step():
                        self._finish(finished)
                if self._done and self._writes.pending < 2 and self._flush_due():
                    self._flush()  # one wave written, one waiting: the next one gathers
                if self._stop.is_set() and not self._tickets and self._intake.empty():
                    return
        except BaseException as exc:  # the engine or the database is gone: hand everything back
            log.critical("the drain loop failed: %s", exc, exc_info=True)
            self.on_fatal(self)

    def _take(self, wait_s: float) -> list[Chunk | Written]:
        """What arrived: chunks of tickets, and waves the writes thread committed."""
        try:
            items = [self._intake.get(timeout=wait_s) if wait_s else self._intake.get_nowait()]
        except queue.Empty:
            return []
        if wait_s and not isinstance(items[0], Written):
            time.sleep(GATHER_S)  # the engine was idle: let the rest of a burst of messages arrive
        while True:
            try:
                items.append(self._intake.get_nowait())
            except queue.Empty:
                return items

    def _receive(self, items: list[Chunk | Written]) -> None:
        for item in items:
            if isinstance(item, Written):
                self._written(item)
            else:
                self._hold(item)

    def _hold(self, chunk: Chunk) -> None:
        tickets, waiting = self._tickets, self._waiting
        for index, key in enumerate(chunk.keys):
            held = tickets.get(key)
            if held is None:
                tickets[key] = [(chunk, index)]
                waiting[key] = None
            else:  # a second delivery of a key in hand just waits for the first
                held.append((chunk, index))
        self._held[chunk.delivery_tag] += len(chunk.keys)

    def _admit(self) -> None:
        """Claim and start waiting documents; suspects get the engine to themselves."""
        if self._exclusive:
            if self.engine.unfinished():
                return
            self._exclusive = False
        tried = self._tried
        suspects = [k for k in self._waiting if k in tried]
        if not suspects:
            self._start(list(self._waiting))
            return
        if self.engine.unfinished():
            return  # let the running batch finish first; the suspects run alone after it
        self._flush(wait=True)  # if a suspect kills us, what others finished is already written
        last_try = [k for k in suspects if tried[k] + 1 >= self.max_attempts]
        group = last_try[:1] or suspects[:SUSPECT_GROUP]
        log.warning(
            "running %d suspect document(s) apart: a worker stopped while they ran", len(group)
        )
        self._exclusive = True
        self._start(group, apart=True)

    def _start(self, keys: list[str], apart: bool = False) -> None:
        """Claim the keys and add them to the engine. A key taken on before (its claim counts
        more than one attempt) is a suspect: unless running `apart`, it is given back with its
        attempt uncounted, and waits to run apart."""
        for key in keys:
            self._waiting.pop(key, None)
            self._tried.pop(key, None)
        claims = self.recorder.claim(keys)
        if not apart:
            suspects = {k: c for k, c in claims.items() if c.attempts > 1}
            if suspects:
                self.recorder.release(list(suspects))
                for key, claim in suspects.items():
                    del claims[key]
                    self._waiting[key] = None
                    self._tried[key] = claim.attempts - 1
        for key in keys:
            if key in self._waiting:
                continue  # a suspect, given back
            claim = claims.get(key)
            if claim is None:  # finished already (a message delivered twice) or cancelled
                self._resolve(key, Outcome(key, "skipped"))
                continue
            outcome = self._refuse(claim)
            if outcome:
                self._complete(outcome)
                continue
            work = Work(key, claim.instruction, claim.max_tokens, self.engine, self._new_id)
            try:
                self._add(work, work.start(claim.body))
            except DocumentTooLong as exc:
                self._complete(Outcome(key, "failed", error=f"document too long: {exc}"))
            except Exception as exc:  # noqa: BLE001 - one document's failure is its row's
                self._complete(self._failed(claim, exc))
            else:
                self._claims[key] = claim
                self.admitted += 1
                faults.crash_if_poison(claim.body)

    def _refuse(self, claim: Claim) -> Outcome | None:
        if claim.attempts > self.max_attempts:
            return Outcome(
                claim.key,
                "failed",
                error=f"gave up after {self.max_attempts} attempts: the worker stopped "
                "(killed or crashed) while summarizing it each time",
            )
        if claim.model != self.model:
            return Outcome(
                claim.key,
                "failed",
                error=f"submitted for model {claim.model!r} but this worker runs {self.model!r}: "
                f"start a worker with SUMMARIZE_MODEL={claim.model}",
            )
        return None

    def _failed(self, claim: Claim, exc: BaseException) -> Outcome:
        log.warning("document %s failed: %s", claim.key[:12], exc, exc_info=exc)
        error = f"{type(exc).__name__}: {exc}"
        if claim.attempts >= self.max_attempts:
            return Outcome(claim.key, "failed", error=f"{error} (after {claim.attempts} attempts)")
        return Outcome(
            claim.key,
            "queued",
            error=f"{error} (attempt {claim.attempts}, trying again)",
            retry_in_s=retry_delay_s(claim.attempts),
        )

    def _new_id(self) -> str:
        return f"r{next(self._ids)}"

    def _add(self, work: Work, requests: list[Request]) -> None:
        for request in requests:
            self._requests[request.request_id] = work
            self.engine.add(request.request_id, request.prompt_ids, request.max_tokens)

    def _finish(self, finished: Finished) -> None:
        work = self._requests.pop(finished.request_id, None)
        if work is None:
            return
        try:
            self._add(work, work.finish(finished))
        except DocumentTooLong as exc:
            self._drop(work)
            self._complete(Outcome(work.key, "failed", error=f"document too long: {exc}"))
            return
        except Exception as exc:  # noqa: BLE001
            self._drop(work)
            self._complete(self._failed(self._claims[work.key], exc))
            return
        if work.done:
            result = work.result
            self._drop(work)
            self._complete(
                Outcome(
                    work.key,
                    "succeeded",
                    summary=result.text,
                    prompt_tokens=work.prompt_tokens,
                    completion_tokens=work.completion_tokens,
                    cached_tokens=work.cached_tokens,
                    parts=work.parts,
                    finish_reason=result.finish_reason,
                )
            )

    def _drop(self, work: Work) -> list[str]:
        """Forget a document's engine requests; returns those still running."""
        ids = work.request_ids()
        for request_id in ids:
            self._requests.pop(request_id, None)
        return ids

    def _complete(self, outcome: Outcome) -> None:
        if not self._done:
            self._first_done_at = time.monotonic()
        self._done.append(outcome)

    def _flush_due(self) -> bool:
        return (
            len(self._done) >= FLUSH_ROWS
            or not self.engine.unfinished()
            or self._closing_at is not None
            or self._stop.is_set()
            or time.monotonic() - self._first_done_at >= self.flush_interval_s
        )

    def _flush(self, wait: bool = False) -> None:
        """Hand the finished documents to the writes thread; with `wait`, until all are written."""
        if self._done:
            done, self._done = self._done, []
            claims = self._claims
            texts = [
                claims[o.key].content_hash
                for o in done
                if o.status == "succeeded" and o.key in claims
            ]
            self._writes.write(done, texts)
        while wait and self._writes.pending:
            self._receive(self._take(wait_s=1.0))

    def _written(self, written: Written) -> None:
        self._writes.reported(written)
        if written.error is not None:
            raise written.error  # the database stayed away: the drain loop fails
        self.recorded += len(written.outcomes)
        for outcome in written.outcomes:
            self._claims.pop(outcome.key, None)
            self._resolve(outcome.key, outcome)

    def _resolve(self, key: str, outcome: Outcome) -> None:
        held = self._held
        for chunk, index in self._tickets.pop(key, ()):
            tag = chunk.delivery_tag
            held[tag] -= 1
            if not held[tag]:
                del held[tag]
            chunk.resolve(index, outcome)

    def _hand_back(self) -> None:
        """Shutting down: give the queue back what we cannot finish within the grace period."""
        if self._waiting:
            waiting, self._waiting, self._tried = list(self._waiting), {}, {}
            self.recorder.release(waiting, claimed=False)
            for key in waiting:
                self._resolve(key, Outcome(key, "handback"))
        if self.engine.unfinished() and time.monotonic() < self._closing_at:
            return
        unfinished = {work.key: work for work in self._requests.values()}
        if not unfinished:
            return
        self._flush(wait=True)
        for work in unfinished.values():
            self.engine.abort(self._drop(work))
        self.recorder.release(list(unfinished))
        for key in unfinished:
            self._claims.pop(key, None)
            self._resolve(key, Outcome(key, "handback"))
        log.warning("handed %d unfinished documents back to the queue", len(unfinished))


def _exit_process(drain: Drain) -> None:
    """Leave at once, acknowledging nothing: the queue delivers our documents again."""
    try:
        drain.engine.close(timeout_s=5)
    finally:
        logging.shutdown()
        os._exit(EXIT_ENGINE_FAILED)
