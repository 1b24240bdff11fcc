"""Sending chunk messages, in the one order rows and messages are written in: the rows
commit first, then the messages are pushed (submit, retry and the requeue sweep)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache

import redis
import sqlalchemy as sa

from core import broker
from core.messages import TASK_NAME, at, chunks, pack, queue_for
from core.settings import Settings
from core.transport import celery_config


@lru_cache(maxsize=4)
def _producer_app(settings: Settings):
    from celery import Celery

    app = Celery("summarize-producer", set_as_current=False)
    app.conf.update(celery_config(settings))
    return app


def enqueue(
    settings: Settings, keys: Iterable[str], model: str | None = None, priority: str | None = None
) -> int:
    """Send the keys as chunk messages to the queue of `model` (by default this process's), at
    `priority` (by default SUMMARIZE_PRIORITY or submit's --priority); returns how many
    messages. Raises redis.ConnectionError."""
    from kombu.exceptions import OperationalError

    app = _producer_app(settings)
    target = queue_for(settings.queue, model or settings.model_name)
    sent = 0
    try:  # a connection of its own, closed after: an idle embedded Redis may then stop
        with app.connection_for_write() as connection, app.amqp.Producer(connection) as producer:
            for chunk in chunks(keys, settings.chunk_size):
                app.send_task(
                    TASK_NAME,
                    kwargs={"keys": pack(chunk)},
                    queue=at(target, priority or settings.priority),
                    producer=producer,
                    ignore_result=True,
                    kwargsrepr=f"{{'keys': <{len(chunk)} documents>}}",
                )
                sent += 1
    except OperationalError as exc:
        raise redis.ConnectionError(str(exc)) from exc
    return sent


def commit_then_push(
    settings: Settings,
    db: sa.Engine,
    write: Callable[[sa.Connection], list[str]],
    undo: Callable[[sa.Connection, list[str]], None] | None = None,
    model: str | None = None,
    priority: str | None = None,
) -> list[str]:
    """The one order rows and their messages are written in (submit, retry, the requeue sweep).

    `write` changes rows in a transaction and returns the result keys to push. The rows commit
    first, so a worker that takes a message always finds them; then the messages are pushed.
    If Redis refuses, `undo` runs in a transaction of its own and BrokerUnavailable says how to
    fix Redis; rows left pending without a message are pushed again by the requeue sweep once
    Redis is back.
    """
    with db.begin() as conn:
        keys = write(conn)
    try:
        enqueue(settings, keys, model, priority)
    except (redis.RedisError, OSError) as exc:
        if undo is not None:
            with db.begin() as conn:
                undo(conn, keys)
        raise broker.unavailable(settings, exc) from exc
    return keys
