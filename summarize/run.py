"""`summarize run`: submit, a worker and `--wait` in one process, like vLLM's own run-batch.

The files are read and queued in a thread while the main thread builds the engine and
runs the worker; the worker stops once the batch's last document is written. Everything
goes through the queue and the database as with `submit` and `summarize worker`, so a run
that is stopped or killed leaves its batch to `summarize worker`, and a second run of the
same files summarizes nothing twice.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

import click

from core import errors
from readers.terminal import say
from summarize.options import DAY_S, Seconds
from summarize.order import Order, order_of, submit_options
from summarize.submit import exit_status, print_progress, queue_documents

PROGRESS_EVERY_S = 1.0  # how often the summarizing bar is redrawn


@click.command()
@submit_options
@click.option(
    "--timeout",
    type=Seconds(31 * DAY_S),
    metavar="SECONDS",
    help="Stop after this long (exit status 4); the rest stays queued for `summarize worker`.",
)
@click.pass_context
def run(ctx, paths: tuple[str, ...], timeout, **options) -> None:
    """Summarize the documents under PATHS now, in this process, and exit when done.

    `submit`, a worker and `--wait` in one command: the model loads while the
    files are read, the worker stops once the batch's last document is written,
    and the exit status is submit --wait's: 0 every document succeeded, 3 some
    failed, 4 the timeout passed, 5 Redis or the database was unreachable (130
    stopped by Ctrl-C or SIGTERM). It takes submit's options. Everything goes
    through the queue: a document summarized before is not summarized again,
    and what a stopped or killed run leaves, `summarize worker` finishes.

    \b
    Example:
      summarize run corpus/
      summarize run requests.jsonl --batch from-openai && \\
          summarize results from-openai --format openai > output.jsonl
    """
    from core import broker, database
    from readers import progress
    from worker import service

    order = order_of(ctx, paths, **options)
    settings = order.settings
    db = database.ready(settings)
    client = broker.connect(settings)  # refused now, not after the engine is built
    if not _any_document(order):  # nothing to summarize: say so without loading a model
        try:
            queue_documents(order, db, client)
        finally:
            broker.release(settings, client)
        print_progress(progress.progress(db, order.batch))
        return
    reading = _Reading(order, db)
    reading.start()
    started = time.monotonic()

    def finished() -> bool:
        """The worker's cue to stop: the files are read and the batch is done (or time is up)."""
        if _timed_out(started, timeout):
            return True
        return reading.done.is_set() and progress.rolled_up(db, order.batch).done

    shown = _Progress(db, order.batch, reading.done)
    shown.start()
    try:
        status = service.run(settings, until=finished, loglevel="WARNING")
    finally:
        reading.stop()
        shown.stop()
        broker.release(settings, client)  # the worker's are closed: the last to leave
    if reading.error is not None:
        raise reading.error
    final = progress.progress(db, order.batch)
    print_progress(final)
    if final.done:
        service.leave(exit_status(final))
    say(
        f"The rest of batch {order.batch} stays queued: `summarize worker` finishes it; "
        f"`summarize status {order.batch}` shows it.",
        err=True,
    )
    if _timed_out(started, timeout):
        service.leave(errors.EXIT_DEADLINE)
    service.leave(status or 128 + signal.SIGINT)  # stopped (Ctrl-C, SIGTERM) before it was done


def _any_document(order: Order) -> bool:
    """Whether the paths hold a file to read (the walk stops at the first)."""
    from jobs import corpus

    walked = corpus.found_in(order.paths, order.follow_links, order.settings.storage_options)
    return any(found.kind == "document" for found in walked)


def _timed_out(started: float, timeout: float | None) -> bool:
    return timeout is not None and time.monotonic() - started >= timeout


class _Reading(threading.Thread):
    """Reads and queues the order's documents beside the worker; `done` once it has ended,
    with `error` set if it failed. `stop` ends it at the next document."""

    def __init__(self, order: Order, db):
        super().__init__(name="submit", daemon=True)
        self.order, self.db = order, db
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        from core import broker

        try:
            with broker.session(self.order.settings) as client:
                queue_documents(self.order, self.db, client, self._check)
        except _Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - raised again in the main thread
            self.error = exc
        finally:
            self.done.set()

    def _check(self) -> None:
        if self._halt.is_set():
            raise _Stopped

    def stop(self) -> None:
        self._halt.set()
        self.join()


class _Stopped(Exception):
    """The run was stopped while its files were being read."""


class _Progress(threading.Thread):
    """Once the files are read, a bar of the batch's finished documents on standard error."""

    def __init__(self, db, batch: str, read: threading.Event):
        super().__init__(name="progress", daemon=True)
        self.db, self.batch, self.read = db, batch, read
        self._halt = threading.Event()

    def run(self) -> None:
        from readers import progress

        while not self.read.wait(0.2):
            if self._halt.is_set():
                return
        now = progress.rolled_up(self.db, self.batch)
        with click.progressbar(
            length=max(now.total, 1),
            label=f"Summarizing {self.batch}",
            file=sys.stderr,
            show_pos=True,
        ) as bar:
            while True:
                bar.length = max(now.total, 1)
                bar.update(now.finished - bar.pos)
                if now.done or self._halt.wait(PROGRESS_EVERY_S):
                    return
                now = progress.rolled_up(self.db, self.batch)

    def stop(self) -> None:
        self._halt.set()
        self.join()
