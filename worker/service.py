"""`summarize worker`: the Celery worker process that owns the engine.

One process, one engine. Celery's thread pool holds enough chunk messages for
`in_flight` documents (eight times the profile's `max_num_seqs` by default): a
message is acknowledged once its slowest document is written, and meanwhile the
others keep the engine full (worker/drain.py admits them as it has room).
Beside it run small threads: one renews the leases of the messages we hold, one
puts back on the queue any document whose message Redis lost, one tells the
batches that ended where they asked to be told (core/notices.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import redis
import sqlalchemy as sa

from core import broker, database, messages, notices, presence, redis_state, requeue
from core.model import resolve as resolve_model
from core.settings import Settings
from worker import echo, logs, runtime
from worker.app import configure
from worker.leases import Leases

log = logging.getLogger("summarize.worker")

LOOK_EVERY_S = 0.2  # how often `until`, or a burst worker, looks whether to stop
BURST_GRACE_S = 0.5  # how long the queue must stay empty before a burst worker leaves
IN_FLIGHT_WAVES = 8  # documents held by default, in engine batches (SUMMARIZE_IN_FLIGHT)
READY = "worker ready"  # logged once the consumer takes messages (tests and operators wait for it)


def run(
    settings: Settings,
    *,
    burst: bool = False,
    loglevel: str = "INFO",
    until: Callable[[], bool] | None = None,
) -> int:
    """Build the engine, then consume the queue until stopped: with `burst`, until it is
    empty; with `until`, once it says so (summarize run: its batch is done)."""
    logs.configure(loglevel)
    profile = settings.profile
    in_flight = settings.in_flight or IN_FLIGHT_WAVES * profile.max_num_seqs
    held = max(2, -(-in_flight // settings.chunk_size))  # chunks held at once
    log.info(
        "profile %s: %s; in flight %d documents, %d messages of up to %d (%s)",
        profile.name,
        ", ".join(f"{k}={v}" for k, v in profile.knobs().items() if k != "name"),
        in_flight,
        held,
        settings.chunk_size,
        profile.use_when,
    )
    if (
        settings.model_name != echo.MODEL and Path(resolve_model(settings)).exists()
    ):  # says how to fetch the model when it is missing
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder needs no hub
    with broker.session(settings) as client:
        home = messages.home(settings)  # this model's queue: only its documents come here
        log.info("queue %r on %s", home, broker.describe(settings))
        live = None
        if settings.metrics_port is not None:  # the port first: a busy one fails in a second
            from worker import metrics

            live = metrics.serve(settings.metrics_host, settings.metrics_port)
        started = time.monotonic()
        drain = runtime.build(settings)
        runtime.install(drain)
        log.info("engine ready in %.1f s", time.monotonic() - started)
        if live is not None:
            drain.recorder.on_recorded = metrics.observe
            live.attach(drain.recorder.db, lambda: drain.in_hand)
        # Before any claim: the documents of batches that expired are ended, never started.
        requeue.expire_overdue(drain.recorder.db, keep_texts=settings.keep_texts)
        app = configure(settings)
        stopping = threading.Event()  # a stop was asked for (SIGTERM, SIGINT)
        _on_shutdown(lambda: (stopping.set(), drain.begin_shutdown(settings.stop_grace_s)))
        _on_ready(lambda: log.info("%s: taking documents from queue %r", READY, home))
        name = f"summarize-{os.getpid()}@{socket.gethostname()}"
        since = time.time()
        leases = Leases(
            broker.connect(settings),
            lambda: drain.held | _scheduled_tags(),
            min(settings.visibility_timeout_s / 4, presence.HEARTBEAT_S),
            rows=lambda: drain.recorder.renew(drain.claimed),
            beat=lambda client: presence.heartbeat(client, settings, name, since),
        )
        leases.start()
        stop = threading.Event()
        sweeper = threading.Thread(
            target=_requeue_stranded, daemon=True, args=(settings, drain.recorder.db, stop)
        )
        sweeper.start()
        told = notices.Notices(drain.recorder.db, settings.notify_secret).start()
        worker = app.Worker(
            pool="threads",
            concurrency=held,
            queues=messages.lists_of(home),  # the most urgent first
            loglevel=loglevel,
            hostname=name,
            without_mingle=True,
            without_gossip=True,
            quiet=True,
        )
        if until is not None:
            threading.Thread(target=_stop_when, args=(until,), daemon=True).start()
        elif burst:
            watcher = threading.Thread(
                target=_stop_when_drained, args=(settings, client, drain), daemon=True
            )
            watcher.start()
        worker.start()
        stop.set()
        leases.stop(farewell=lambda client: presence.gone(client, settings, name))
        drain.stop(leaving=True)
        told.stop()  # after the last rows: a burst worker's batches are told they ended
        log.info("stopped: %d documents admitted, %d written", drain.admitted, drain.recorded)
        return _exit_status(worker.exitcode or 0, stopping.is_set(), drain)


def leave(status: int) -> NoReturn:
    """End the process now with `status`, once `run` has returned: every row is written and
    every message acknowledged or handed back, and the engine's processes were told to stop.
    The interpreter's own teardown would wait seconds for them, and for nothing else."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def _exit_status(celery_status: int, asked_to_stop: bool, drain) -> int:
    """0 for a stop that was asked for and left nothing in hand, whatever Celery said before.

    Celery marks its run failed when it meets an error it then recovers from: kombu's Redis
    transport raises while putting back held messages on a connection that Redis (restarted)
    already closed. The worker reconnects and goes on; a later SIGTERM is a clean stop.
    """
    if celery_status and asked_to_stop and drain.idle():
        log.info(
            "stopped as asked, every document written or handed back (Celery's own exit "
            "status was %d)",
            celery_status,
        )
        return 0
    return celery_status


def _on_shutdown(callback) -> None:
    """Run `callback` as Celery begins a warm shutdown (SIGTERM, SIGINT, or --burst's end)."""
    from celery.signals import worker_shutting_down

    worker_shutting_down.connect(lambda **_: callback(), weak=False)


def _on_ready(callback) -> None:
    """Run `callback` once Celery's consumer is connected and takes messages."""
    from celery.signals import worker_ready

    worker_ready.connect(lambda **_: callback(), weak=False)


def _scheduled_tags() -> frozenset[str]:
    """Delivery tags of retries Celery holds until their countdown ends."""
    from celery.worker import state

    for _ in range(3):
        try:
            return frozenset(r.message.delivery_tag for r in list(state.scheduled_requests))
        except RuntimeError:  # the set changed while we looked
            continue
    return frozenset()


def _requeue_stranded(settings: Settings, db: sa.Engine, stop: threading.Event) -> None:
    """Every REQUEUE_EVERY_S: queue again what the database says is pending and Redis lost;
    and vacuum the rollups our writes keep changing (PostgreSQL; core/database.py)."""
    client = None
    every_s = requeue.REQUEUE_EVERY_S
    while not stop.wait(every_s):
        try:
            client = client or broker.connect(settings)
            requeue.sweep(db, client, settings, older_than_s=every_s)
        except Exception as exc:  # noqa: BLE001 - Redis or the database is down: next time
            log.warning("could not look for stranded documents: %s", exc)
            client = None
        database.vacuum_rollups(db)


def _stop_when(done: Callable[[], bool]) -> None:
    """Ask Celery to stop once `done()` says so (asked every LOOK_EVERY_S)."""
    while True:
        try:
            if done():
                break
        except Exception as exc:  # noqa: BLE001 - the database may be restarting: ask again
            log.warning("could not tell whether to stop: %s", exc)
        time.sleep(LOOK_EVERY_S)
    _stop_celery()


def _stop_celery() -> None:
    """A warm shutdown, as Celery's own SIGTERM handler asks for one."""
    from celery.worker import state

    state.should_stop = 0


def _stop_when_drained(settings: Settings, client: redis.Redis, drain) -> None:
    """For --burst: ask Celery to stop once the queue and this worker have been empty a while."""
    from celery.worker import state

    db = drain.recorder.db
    idle_since = None
    while True:
        time.sleep(LOOK_EVERY_S)
        try:
            # Unacknowledged messages are in a worker's hands, or come back when it died.
            queued = redis_state.messages_in_redis(client, messages.home(settings))
        except (redis.RedisError, OSError):
            idle_since = None
            continue
        busy = (
            queued
            or state.active_requests
            or state.reserved_requests
            or state.scheduled_requests
            or not drain.idle()
        )
        if busy:
            idle_since = None
            continue
        idle_since = idle_since or time.monotonic()
        if time.monotonic() - idle_since < BURST_GRACE_S:
            continue
        try:  # before leaving, make sure no pending document lost its message
            if requeue.requeue_stranded(db, client, settings, older_than_s=0).documents:
                idle_since = None
                continue
        except Exception as exc:  # noqa: BLE001
            log.warning("could not look for stranded documents: %s", exc)
            idle_since = None
            continue
        log.info("burst: the queue is empty, stopping")
        _stop_celery()
        return
