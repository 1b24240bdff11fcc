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

from jobs import queue
from jobs.models import is_pending, lease_lapsed, results, utcnow
from jobs.settings import Settings

log = logging.getLogger(__name__)

REQUEUE_EVERY_S = 30.0  # how often workers and `submit --wait` look for stranded documents
PAGE_ROWS = 10_000  # pending rows read, compared and pushed at a time


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
    lost_data = bool(client.set(queue.marker(settings.queue), "1", nx=True))
    if not lost_data and queue.messages_in_redis(client, settings.queue):
        return Requeued(0, 0)
    return requeue_stranded(db, client, settings, older_than_s=older_than_s, batch=batch)


def requeue_stranded(
    db: sa.Engine,
    client: redis.Redis,
    settings: Settings,
    *,
    older_than_s: float = 60.0,
    batch: str | None = None,
) -> Requeued:
    """Push a fresh message for every pending document that has none in Redis.

    Pending rows are read PAGE_ROWS at a time and what each page finds stranded is pushed at
    once, so memory stays flat with a million documents queued: what is held is the keys
    Redis has (8 bytes each) and those pushed.
    """
    now = utcnow()
    cutoff = now - timedelta(seconds=older_than_s)
    # a row a live worker holds under its lease is not stranded
    unheld = sa.or_(results.c.status == "queued", lease_lapsed(now))
    query = sa.select(results.c.result_key).where(is_pending, unheld, results.c.created_at < cutoff)
    if batch is not None:
        query = query.where(results.c.batch == batch)
    present: queue.KeysInRedis | None = None  # read once a pending row is found
    pushed: set[int] = set()  # fingerprints of the keys pushed (a key can have several rows)
    documents = rows = 0
    with db.connect() as conn:
        for page in conn.execution_options(yield_per=PAGE_ROWS).execute(query).partitions():
            if present is None:  # after the rows are read: a message that was pushed for
                present = queue.keys_in_redis(client, settings.queue)  # them is seen
            stranded = [key for (key,) in page if key not in present]
            rows += len(stranded)
            fresh = {}
            for key in stranded:
                mark = queue.fingerprint(key)
                if mark not in pushed:
                    pushed.add(mark)
                    fresh[key] = None
            if fresh:
                queue.commit_then_push(settings, db, _waiting_again(list(fresh), unheld))
                documents += len(fresh)
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
            .where(results.c.result_key.in_(keys), results.c.status == "running", unheld)
            .values(status="queued", claimed_by=None, lease_until=None)
        )
        return keys

    return write
