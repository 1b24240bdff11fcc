"""The loop that owns the engine: admit documents as they arrive, record results in bulk.

Celery hands each message to a thread of the worker's pool; that thread calls
`Drain.summarize(key)` and waits. The drain thread gathers every waiting
document, claims them in one transaction, adds their requests to the running
engine, and steps it. Finished documents are written together, in one
transaction, at most every `flush_interval_s`; only then are their threads
released, and Celery acknowledges their messages. The engine is never left to
drain while messages wait: new requests join the running batch between steps.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

from jobs.settings import Settings
from worker.engine import Engine, Finished
from worker.parts import DocumentTooLong, Request, Work
from worker.recorder import Claim, Outcome, Recorder

log = logging.getLogger(__name__)

EXIT_ENGINE_FAILED = 70  # the worker exits so its unacknowledged messages are delivered again
FLUSH_ROWS = 1024  # write at least this often, whatever the interval
GATHER_S = 0.1  # when the engine is idle, wait this long for more documents before starting


@dataclass(frozen=True)
class Ticket:
    key: str
    delivery_tag: str | None
    future: Future


def retry_delay_s(attempts: int) -> float:
    """Backoff before trying a failed document again: 5 s, 20 s, then 60 s."""
    return float(min(60, 5 * 4 ** max(attempts - 1, 0)))


class Drain:
    def __init__(
        self,
        engine: Engine,
        recorder: Recorder,
        settings: Settings,
        *,
        leases=None,
        on_fatal=None,
    ):
        self.engine = engine
        self.recorder = recorder
        self.model = settings.model_name
        self.max_attempts = settings.max_attempts
        self.flush_interval_s = settings.flush_interval_s
        self.lease_interval_s = settings.visibility_timeout_s / 4
        self.leases = leases
        self.on_fatal = on_fatal or _exit_process
        self._intake: queue.SimpleQueue[Ticket] = queue.SimpleQueue()
        self._tickets: dict[str, list[Ticket]] = {}  # by key: everyone waiting on a document
        self._claims: dict[str, Claim] = {}  # by key: documents in the engine
        self._requests: dict[str, Work] = {}  # by engine request id
        self._done: list[Outcome] = []  # finished, not yet written
        self._first_done_at = 0.0
        self._ids = itertools.count()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drain", daemon=True)
        self.admitted = 0
        self.recorded = 0

    # -- called from Celery's threads -------------------------------------------------------

    def summarize(self, key: str, delivery_tag: str | None = None) -> Future:
        """Queue one document for the engine; the future resolves once its rows are written."""
        future: Future = Future()
        self._intake.put(Ticket(key, delivery_tag, future))
        return future

    def idle(self) -> bool:
        return self._intake.empty() and not self._tickets

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Finish what is in the engine, write it, end the loop, and shut the engine down."""
        self._stop.set()
        self._thread.join(timeout)
        self.engine.close()
        if self.leases:
            self.leases.close()

    # -- the drain thread -------------------------------------------------------------------

    def _run(self) -> None:
        last_lease = time.monotonic()
        try:
            while True:
                busy = self.engine.unfinished() > 0
                tickets = self._take(wait_s=0.0 if busy or self._done else 0.2)
                if tickets:
                    self._admit(tickets)
                if self.engine.unfinished():
                    for finished in self.engine.step():
                        self._finish(finished)
                if self._done and self._flush_due():
                    self._flush()
                if self.leases and time.monotonic() - last_lease >= self.lease_interval_s:
                    self.leases.renew(t.delivery_tag for ts in self._tickets.values() for t in ts)
                    last_lease = time.monotonic()
                if self._stop.is_set() and not self._tickets and self._intake.empty():
                    return
        except BaseException as exc:  # the engine or the database is gone: hand everything back
            log.critical("the drain loop failed: %s", exc, exc_info=True)
            self.on_fatal(self)

    def _take(self, wait_s: float) -> list[Ticket]:
        tickets = []
        try:
            tickets.append(
                self._intake.get(timeout=wait_s) if wait_s else self._intake.get_nowait()
            )
        except queue.Empty:
            return tickets
        if wait_s:  # the engine was idle: let the rest of a burst of messages arrive
            time.sleep(GATHER_S)
        while True:
            try:
                tickets.append(self._intake.get_nowait())
            except queue.Empty:
                return tickets

    def _admit(self, tickets: list[Ticket]) -> None:
        fresh = []
        for ticket in tickets:
            if ticket.key not in self._tickets:
                fresh.append(ticket.key)
            self._tickets.setdefault(ticket.key, []).append(ticket)
        claims = self.recorder.claim(list(dict.fromkeys(fresh)))
        for key in dict.fromkeys(fresh):
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

    def _drop(self, work: Work) -> None:
        for request_id in work.request_ids():
            self._requests.pop(request_id, None)

    def _complete(self, outcome: Outcome) -> None:
        if not self._done:
            self._first_done_at = time.monotonic()
        self._done.append(outcome)

    def _flush_due(self) -> bool:
        return (
            len(self._done) >= FLUSH_ROWS
            or not self.engine.unfinished()
            or self._stop.is_set()
            or time.monotonic() - self._first_done_at >= self.flush_interval_s
        )

    def _flush(self) -> None:
        done, self._done = self._done, []
        self.recorder.record(done)
        self.recorded += len(done)
        for outcome in done:
            self._claims.pop(outcome.key, None)
            self._resolve(outcome.key, outcome)

    def _resolve(self, key: str, outcome: Outcome) -> None:
        for ticket in self._tickets.pop(key, []):
            ticket.future.set_result(outcome)


def _exit_process(drain: Drain) -> None:
    """Leave at once, acknowledging nothing: the queue delivers our documents again."""
    try:
        drain.engine.close(timeout_s=5)
    finally:
        logging.shutdown()
        os._exit(EXIT_ENGINE_FAILED)
