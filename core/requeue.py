"""Putting stranded documents back on the queue: the database is the source of truth.

A row is stranded when it is queued or running but no message for it exists
anywhere in Redis: not waiting in the queue, and not held (unacknowledged) by a
worker. That happens when Redis lost its data (restarted without persistence,
flushed, failed over) or a process died between writing rows and pushing
messages. A message pushed twice is harmless: the worker skips a document that
is already finished.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import redis
import sqlalchemy as sa

from core import messages, producer, redis_state, retention
from core.settings import Settings
from core.tables import Status, batch_rollups, batches, is_pending, lease_lapsed, results, utcnow

log = logging.getLogger(__name__)

REQUEUE_EVERY_S = 30.0  # how often workers and `submit --wait` look for stranded documents
PAGE_ROWS = 10_000  # pending documents read, compared and pushed at a time


@dataclass(frozen=True)
class Requeued:
    documents: int  # distinct documents put back on the queue
    rows: int  # rows they answer


def sweep(
    db: sa.Engine,
    client: redis.Redis,
    settings: Settings,
    *,
    older_than_s: float,
    batch: str | None = None,
) -> Requeued:
    """The periodic look for stranded documents, at a cost that does not grow with the queue.

    Redis loses messages by losing its data (a restart without persistence, a flush, a
    failover): then the queue's marker key is gone too, and every pending document is
    compared with what Redis holds. Likewise when Redis holds no message at all. Otherwise
    the sweep costs two Redis commands. A message lost alone (a producer killed between
    commit and push) is found by `summarize requeue`, which always compares in full.
    """
    expire_overdue(db, keep_texts=settings.keep_texts)
    lost_data = bool(client.set(redis_state.marker(settings.queue), "1", nx=True))
    if not lost_data and redis_state.messages_in_redis(client, _pending_queues(db, settings)):
        return Requeued(0, 0)
    return requeue_stranded(db, client, settings, older_than_s=older_than_s, batch=batch)


EXPIRED = (
    "expired: not summarized before the batch's --expire-after passed "
    "(submit it again, or with a longer --expire-after)"
)


def expire_overdue(db: sa.Engine, *, keep_texts: bool = False) -> int:
    """End the queued documents of batches whose `expires_at` has passed: `expired`, with the
    error EXPIRED (running ones finish). Part of every sweep; returns how many."""
    now = utcnow()
    overdue = (  # only batches with documents queued: a batch expired long ago costs nothing
        sa.select(batches.c.name)
        .join(batch_rollups, batch_rollups.c.batch == batches.c.name)
        .where(batches.c.expires_at < now, batch_rollups.c.queued > 0)
    )
    with db.begin() as conn:
        names = list(conn.execute(overdue).scalars())
        if not names:
            return 0
        ended = retention.end_queued(
            conn,
            results.c.batch.in_(names),
            status=Status.EXPIRED,
            error=EXPIRED,
            keep_texts=keep_texts,
        )
    if ended:
        log.warning("%d queued documents expired (batches %s)", ended, ", ".join(names))
    return ended


def queued_by_model(db: sa.Engine) -> dict[str, int]:
    """Documents queued per model, from the batch rollups (a row per batch, not per document)."""
    query = (
        sa.select(batches.c.model, sa.func.sum(batch_rollups.c.queued))
        .join(batch_rollups, batch_rollups.c.batch == batches.c.name)
        .group_by(batches.c.model)
    )
    with db.connect() as conn:
        return {model: int(count or 0) for model, count in conn.execute(query)}


def pending_models(db: sa.Engine) -> list[str]:
    """The models that have documents queued or running, from the batch rollups (cheap)."""
    query = (
        sa.select(batches.c.model)
        .join(batch_rollups, batch_rollups.c.batch == batches.c.name)
        .where((batch_rollups.c.queued + batch_rollups.c.running) > 0)
        .distinct()
    )
    with db.connect() as conn:
        return sorted(conn.execute(query).scalars())


def _pending_queues(db: sa.Engine, settings: Settings) -> list[str]:
    """The queues documents may wait in: this process's model's, and each pending model's."""
    models = {settings.model_name, *pending_models(db)}
    return sorted({messages.queue_for(settings.queue, model) for model in models})


def requeue_stranded(
    db: sa.Engine,
    client: redis.Redis,
    settings: Settings,
    *,
    older_than_s: float = 60.0,
    batch: str | None = None,
) -> Requeued:
    """Push a fresh message for every pending document that has none in Redis (once the
    documents of expired batches are ended: they are never started).

    Memory stays flat with a million documents queued: pending documents are read PAGE_ROWS
    at a time (a row a document, with the rows it answers), compared with the keys Redis
    holds (8 bytes each), and only the stranded ones are kept, 32 bytes each, to be pushed
    once the read is over, so no transaction stays open while Redis is written.
    """
    expire_overdue(db, keep_texts=settings.keep_texts)
    now = utcnow()
    cutoff = now - timedelta(seconds=older_than_s)
    # a row a live worker holds under its lease is not stranded
    unheld = sa.or_(results.c.status == Status.QUEUED, lease_lapsed(now))
    query = (  # at each batch's priority: a key pending in two batches may go twice
        sa.select(results.c.result_key, results.c.model, batches.c.priority, sa.func.count())
        .join(batches, batches.c.name == results.c.batch)
        .where(is_pending, unheld, results.c.created_at < cutoff)
        .group_by(results.c.result_key, results.c.model, batches.c.priority)
    )
    if batch is not None:
        query = query.where(results.c.batch == batch)
    present: redis_state.KeysInRedis | None = None  # read once a pending row is found
    stranded: dict[tuple, bytearray] = {}  # by model and priority: their keys, 32 bytes each
    rows = 0
    with db.connect() as conn:
        for page in conn.execution_options(yield_per=PAGE_ROWS).execute(query).partitions():
            if present is None:  # after the rows are read: a message that was pushed for
                present = redis_state.keys_in_redis(
                    client, _pending_queues(db, settings)
                )  # is seen
            for key, model, priority, count in page:
                if key is not None and key not in present:
                    stranded.setdefault((model, priority), bytearray()).extend(bytes.fromhex(key))
                    rows += count
    step = PAGE_ROWS * messages.KEY_BYTES
    for (model, priority), keys_of_model in stranded.items():
        for start in range(0, len(keys_of_model), step):
            piece = keys_of_model[start : start + step]
            keys = [
                piece[i : i + messages.KEY_BYTES].hex()
                for i in range(0, len(piece), messages.KEY_BYTES)
            ]
            write = _waiting_again(keys, unheld)
            producer.commit_then_push(settings, db, write, model=model, priority=priority)
    documents = sum(len(k) for k in stranded.values()) // messages.KEY_BYTES
    if documents:
        log.warning(
            "requeued %d stranded documents (%d rows) with no message in Redis", documents, rows
        )
    return Requeued(documents, rows)


def _waiting_again(keys: list[str], unheld) -> Callable[[sa.Connection], list[str]]:
    def write(conn: sa.Connection) -> list[str]:
        """A running row whose message is gone is waiting again."""
        conn.execute(
            results.update()
            .where(results.c.result_key.in_(keys), results.c.status == Status.RUNNING, unheld)
            .values(status=Status.QUEUED, claimed_by=None, lease_until=None)
        )
        return keys

    return write
