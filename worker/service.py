"""`summarize worker`: the Celery worker process that owns the engine.

One process, one engine. Celery's thread pool holds `in_flight` messages (twice
the profile's `max_num_seqs` by default), so the engine always has a second wave
waiting behind the sequences it is running.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path

import redis

from jobs import broker
from jobs.settings import Settings
from worker import runtime
from worker.app import configure
from worker.model import resolve as resolve_model

log = logging.getLogger("summarize.worker")

BURST_GRACE_S = 3.0  # how long the queue must stay empty before a burst worker leaves


def run(settings: Settings, *, burst: bool = False, loglevel: str = "INFO") -> int:
    """Build the engine, then consume the queue until stopped (or, with burst, until it is empty)."""
    _logging(loglevel)
    profile = settings.profile
    in_flight = settings.in_flight or 2 * profile.max_num_seqs
    log.info(
        "profile %s: %s; in flight %d",
        profile.name,
        ", ".join(f"{k}={v}" for k, v in profile.knobs().items() if k != "name"),
        in_flight,
    )
    if Path(resolve_model(settings)).exists():  # says how to fetch the model when it is missing
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder needs no hub
    with broker.session(settings) as client:
        log.info("queue %r on %s", settings.queue, broker.describe(settings))
        started = time.monotonic()
        drain = runtime.build(settings)
        runtime.install(drain)
        log.info("engine ready in %.1f s", time.monotonic() - started)
        app = configure(settings)
        worker = app.Worker(
            pool="threads",
            concurrency=in_flight,
            queues=[settings.queue],
            loglevel=loglevel,
            hostname=f"summarize-{os.getpid()}@{socket.gethostname()}",
            without_mingle=True,
            without_gossip=True,
            quiet=True,
        )
        if burst:
            watcher = threading.Thread(
                target=_stop_when_drained, args=(client, drain, settings.queue), daemon=True
            )
            watcher.start()
        worker.start()
        drain.stop()
        log.info("stopped: %d documents admitted, %d written", drain.admitted, drain.recorded)
        return worker.exitcode or 0


def _stop_when_drained(client: redis.Redis, drain, queue: str) -> None:
    """For --burst: ask Celery to stop once the queue and this worker have been empty a while."""
    from celery.worker import state

    idle_since = None
    while True:
        time.sleep(0.5)
        try:
            # Unacknowledged messages are in a worker's hands, or come back when it died.
            queued = broker.queue_length(client, queue) + client.hlen("unacked")
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
        if time.monotonic() - idle_since >= BURST_GRACE_S:
            log.info("burst: the queue is empty, stopping")
            state.should_stop = 0
            return


def _logging(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
