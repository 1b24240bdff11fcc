"""The loop that owns the engine: admit documents as they arrive, record results in bulk.

Celery hands each chunk message to a thread of the worker's pool; that thread
calls `Drain.summarize_all(keys)` and waits for every document of the chunk. The
drain thread gathers the waiting documents, claims as many as the engine has room
for (its running batch and half a wave behind it) in one transaction, adds their
requests to the running engine, and steps it; the rest wait in hand, unclaimed.
Finished documents are written together, in one transaction, at most every
`flush_interval_s`, by the writes thread (worker/writes.py) while the engine
steps on; each document settles once its wave is committed, and once all of a
chunk's have, the chunk's future resolves and Celery acknowledges its message.
The engine is never left to drain while messages wait, nor while rows are
written: new requests join the running batch between steps.

The loop's parts, each in its own module: who waits on which document
(tickets.py), who starts next, suspects apart (admission.py), the documents in
the engine (running.py), and the waves of rows (writes.py). What is left here
is the loop, a document's outcome, and handing work back on shutdown.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from core import messages
from core.messages import NORMAL
from core.settings import Settings
from core.tables import Status
from worker import faults
from worker.admission import Admission
from worker.engine import Engine, Finished
from worker.parts import DocumentTooLong, Work
from worker.recorder import Recorder
from worker.running import Running
from worker.tickets import Chunk, Signal, Tickets
from worker.work import Claim, Outcome
from worker.writes import Writes, Written

log = logging.getLogger(__name__)

EXIT_ENGINE_FAILED = 70  # the worker exits so its unacknowledged messages are delivered again
GATHER_S = 0.005  # when the engine is idle, wait this long for more documents before starting


def retry_delay_s(attempts: int) -> float:
    """Backoff before trying a failed document again: 5 s, 15 s, then 30 s."""
    return float(min(30, 5 * 3 ** max(attempts - 1, 0)))


class Drain:
    def __init__(self, engine: Engine, recorder: Recorder, settings: Settings, *, on_fatal=None):
        self.engine = engine
        self.recorder = recorder
        self.model = settings.model_name
        self.queue = messages.home(settings)  # the model's queue its messages come from
        self.max_attempts = settings.max_attempts
        self.on_fatal = on_fatal or _exit_process
        self._intake: queue.SimpleQueue[Chunk | Written] = queue.SimpleQueue()
        self._tickets = Tickets()
        self._admission = Admission(settings.max_attempts)
        seqs = settings.profile.max_num_seqs
        self._most = seqs + seqs // 2  # engine requests: the running batch, half a wave waiting
        self._wave = max(seqs // 4, 1)  # documents admitted at once (one claim) while it runs
        self._running = Running(engine)
        self._writes = Writes(recorder, self._intake.put, settings.flush_interval_s)
        self._closing_at: float | None = None  # set by begin_shutdown: hand back by then
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drain", daemon=True)
        self.admitted = 0
        self.recorded = 0

    # -- called from other threads ----------------------------------------------------------

    def summarize_all(
        self, keys: list[str], delivery_tag: str | None = None, urgency: int = NORMAL
    ) -> Future:
        """Queue a chunk's documents, to start before those of less `urgency` held (its
        batch's priority, core/messages.urgency); the future resolves to how each settled (an
        `Outcome` written to its rows, or a `Signal`), in the keys' order, once every one has."""
        chunk = Chunk.of(keys, delivery_tag, urgency)
        if keys:
            self._intake.put(chunk)
        return chunk.future

    @property
    def held(self) -> frozenset[str]:
        """Delivery tags of the messages we hold, for the leases (read from another thread)."""
        return self._tickets.held

    @property
    def claimed(self) -> list[str]:
        """Keys of the documents this worker is running, for their row leases (another thread)."""
        return self._running.keys

    def idle(self) -> bool:
        return self._intake.empty() and not self._tickets

    @property
    def in_hand(self) -> int:
        """Documents this worker holds, running or waiting (for the metrics)."""
        return len(self._tickets)

    def start(self) -> None:
        self._writes.start()
        self._thread.start()

    @classmethod
    def built_on_its_thread(
        cls, make_engine: Callable[[], Engine], recorder: Recorder, settings: Settings
    ) -> Drain:
        """A started drain loop whose engine was built by the thread that runs the loop.

        vLLM's CPU build, with its engine in this process, binds its compute threads to the
        thread that builds the engine; stepped from another thread it generated 20 % slower
        (docs/performance.md, "The engine in the worker's process"). Returns once the engine
        is built, or raises what building it raised."""
        made: queue.SimpleQueue[Drain | BaseException] = queue.SimpleQueue()

        def run() -> None:
            try:
                drain = cls(make_engine(), recorder, settings)
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
                made.put(exc)
                return
            drain._thread = threading.current_thread()
            drain._writes.start()
            made.put(drain)
            drain._run()

        threading.Thread(target=run, name="drain", daemon=True).start()
        found = made.get()
        if isinstance(found, BaseException):
            raise found
        return found

    def begin_shutdown(self, grace_s: float) -> None:
        """Hand back what has not started; finish what runs within `grace_s`, hand back the rest."""
        self._closing_at = time.monotonic() + grace_s

    def stop(self, timeout: float | None = None, leaving: bool = False) -> None:
        """End the loop once nothing is in hand, and shut the engine down (`leaving`: the
        process exits next, so the engine's processes are not waited for)."""
        self._stop.set()
        self._thread.join(timeout)
        self._writes.stop(timeout)
        self.engine.close(wait=not leaving)

    # -- the drain thread -------------------------------------------------------------------

    def _run(self) -> None:
        writes = self._writes
        try:
            while True:
                busy = self.engine.unfinished() > 0
                ready = self._admission or (writes.gathered and writes.pending < 2)
                self._receive(self._take(wait_s=0.0 if busy or ready else 0.2))
                if self._closing_at is not None:
                    self._hand_back()
                elif self._admission:
                    self._admit()
                if self.engine.unfinished():
                    for finished in self.engine.step():
                        self._finish(finished)
                hurry = (
                    not self.engine.unfinished()
                    or self._closing_at is not None
                    or self._stop.is_set()
                )
                if writes.due(hurry):
                    writes.flush()  # one wave written, one waiting: the next one gathers
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
                self._admission.wait(self._tickets.hold(item), item.urgency)

    def _admit(self) -> None:
        """Claim and start waiting documents, as many as the engine has room for, once that
        is a wave; suspects get the engine to themselves. The others wait in hand, unclaimed:
        a crash makes no suspects of them, and a second try joins a short queue."""
        unfinished = self.engine.unfinished()
        room = self._most - unfinished
        if unfinished and room < self._wave:
            return
        admitted = self._admission.next(engine_busy=unfinished > 0, room=room)
        if admitted is None:
            return
        keys, apart = admitted
        if apart:
            self._flush_and_wait()  # if a suspect kills us, what others finished is written
            log.warning(
                "running %d suspect document(s) apart: a worker stopped while they ran", len(keys)
            )
        self._start(keys, apart)

    def _start(self, keys: list[str], apart: bool = False) -> None:
        """Claim the keys and add them to the engine. A key taken on before (its claim counts
        more than one attempt) is a suspect: unless running `apart`, it is given back with its
        attempt uncounted, and waits to run apart."""
        claims = self.recorder.claim(keys)
        others = {k: c for k, c in claims.items() if c.model != self.model}
        if others:  # a message from before queues were per model, or sent by hand
            self._give_back(others)
            claims = {k: c for k, c in claims.items() if k not in others}
        suspects = {} if apart else {k: c for k, c in claims.items() if c.attempts > 1}
        if suspects:
            self.recorder.release(list(suspects))
            for key, claim in suspects.items():
                self._admission.suspect(key, claim.attempts - 1)
        # the documents about to start, tokenized in one call (not those _begin refuses)
        bodies = [c.body for k, c in claims.items() if k not in suspects and not self._refuse(c)]
        with self.engine.reading(bodies):
            for key in keys:
                if key in suspects or key in others:
                    continue
                claim = claims.get(key)
                if claim is None:  # finished already (a message delivered twice) or cancelled
                    self._tickets.settle(key, Signal.SKIPPED)
                else:
                    self._begin(claim)

    def _begin(self, claim: Claim) -> None:
        outcome = self._refuse(claim)
        if outcome:
            self._complete(outcome)
            return
        work = self._running.work(claim)
        try:
            self._running.start(claim, work, work.start(claim.body))
        except DocumentTooLong as exc:
            self._complete(Outcome(claim.key, Status.FAILED, error=f"document too long: {exc}"))
        except Exception as exc:  # noqa: BLE001 - one document's failure is its row's
            self._complete(self._failed(claim, exc))
        else:
            self.admitted += 1
            faults.crash_if_poison(claim.body)

    def _give_back(self, others: dict[str, Claim]) -> None:
        """Documents of another model: left queued, attempt uncounted, for a worker running
        it (the requeue sweep sends them to their model's queue; `summarize requeue` at once)."""
        self.recorder.release(list(others))
        models = sorted({c.model for c in others.values()})
        log.warning(
            "%d document(s) for model %s reached this worker (model %r): left queued for a "
            "worker running it",
            len(others),
            ", ".join(map(repr, models)),
            self.model,
        )
        for key in others:
            self._tickets.settle(key, Signal.SKIPPED)

    def _refuse(self, claim: Claim) -> Outcome | None:
        if claim.attempts > self.max_attempts:
            return Outcome(
                claim.key,
                Status.FAILED,
                error=f"gave up after {self.max_attempts} attempts: the worker stopped "
                "(killed or crashed) while summarizing it each time",
            )
        return None

    def _failed(self, claim: Claim, exc: BaseException) -> Outcome:
        log.warning("document %s failed: %s", claim.key[:12], exc, exc_info=exc)
        error = f"{type(exc).__name__}: {exc}"
        if claim.attempts >= self.max_attempts:
            tries = f"{claim.attempts} attempt" + ("s" if claim.attempts != 1 else "")
            return Outcome(claim.key, Status.FAILED, error=f"{error} (after {tries})")
        return Outcome(
            claim.key,
            Status.QUEUED,
            error=f"{error} (attempt {claim.attempts}, trying again)",
            retry_in_s=retry_delay_s(claim.attempts),
        )

    def _finish(self, finished: Finished) -> None:
        running = self._running
        work = running.finished(finished)
        if work is None:
            return
        try:
            running.add(work, work.finish(finished))
        except DocumentTooLong as exc:
            running.drop(work)
            self._complete(Outcome(work.key, Status.FAILED, error=f"document too long: {exc}"))
            return
        except Exception as exc:  # noqa: BLE001
            running.drop(work)
            self._complete(self._failed(running.claim(work.key), exc))
            return
        if work.done:
            running.drop(work)
            self._complete(_succeeded(work, running.claim(work.key).body))

    def _complete(self, outcome: Outcome) -> None:
        claim = self._running.claim(outcome.key)
        summarized = outcome.status == Status.SUCCEEDED and claim is not None
        self._writes.add(outcome, claim.content_hash if summarized else None)

    def _flush_and_wait(self) -> None:
        """Hand the finished documents to the writes thread, and wait until all are written."""
        self._writes.flush()
        while self._writes.pending:
            self._receive(self._take(wait_s=1.0))

    def _written(self, written: Written) -> None:
        self._writes.reported()
        if written.error is not None:
            raise written.error  # the database stayed away: the drain loop fails
        self.recorded += len(written.outcomes)
        for outcome in written.outcomes:
            self._running.discard(outcome.key)
            self._tickets.settle(outcome.key, outcome)

    def _hand_back(self) -> None:
        """Shutting down: give the queue back what we cannot finish within the grace period."""
        waiting = self._admission.take_all()
        if waiting:
            self.recorder.release(waiting, claimed=False)
            for key in waiting:
                self._tickets.settle(key, Signal.HANDED_BACK)
        if self.engine.unfinished() and time.monotonic() < self._closing_at:
            return
        unfinished = self._running.unfinished()
        if not unfinished:
            return
        self._flush_and_wait()
        for work in unfinished.values():
            self.engine.abort(self._running.drop(work))
        self.recorder.release(list(unfinished))
        for key in unfinished:
            self._running.discard(key)
            self._tickets.settle(key, Signal.HANDED_BACK)
        log.warning("handed %d unfinished documents back to the queue", len(unfinished))


def _succeeded(work: Work, body: str) -> Outcome:
    """A summary's row: its text, what it cost, and its quality signals."""
    summary = work.result
    found = work.signals(body)
    return Outcome(
        work.key,
        Status.SUCCEEDED,
        summary=summary.text,
        prompt_tokens=work.prompt_tokens,
        completion_tokens=work.completion_tokens,
        cached_tokens=work.cached_tokens,
        parts=work.parts,
        finish_reason=summary.finish_reason,
        repetition=found.repetition,
        copied=found.copied,
        novel_numbers=found.novel_numbers,
        compression=summary.completion_tokens / max(work.document_tokens, 1),
        looped=found.looped,
        flaw=found.flaw,
    )


def _exit_process(drain: Drain) -> None:
    """Leave at once, acknowledging nothing: the queue delivers our documents again."""
    try:
        drain.engine.close(timeout_s=5)
    finally:
        logging.shutdown()
        os._exit(EXIT_ENGINE_FAILED)
