"""Putting stranded documents back on the queue: the database is the source of truth.

A row is stranded when it is queued or running but no message for it exists
anywhere in Redis: not waiting in the queue, and not held (unacknowledged) by a
worker. That happens when Redis lost its data (restarted without persistence,
flushed, failed over) or a process died between writing rows and pushing
messages. A message pushed twice is harmless: the worker skips a document that
is already finished.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from datetime import timedelta

import redis
import sqlalchemy as sa

from jobs import broker
from jobs.messages import summarize_message
from jobs.models import PENDING, results, utcnow

log = logging.getLogger(__name__)

UNACKED = "unacked"  # kombu's hash of messages workers hold
SCAN_LIMIT = 50_000  # above this many messages in Redis, the queue is busy: look again later
REQUEUE_EVERY_S = 30.0  # how often workers and `submit --wait` look for stranded documents


@dataclass(frozen=True)
class Requeued:
    documents: int  # distinct documents put back on the queue
    rows: int  # rows they answer
    scanned: bool  # False when Redis held too many messages to compare


def messages_in_redis(client: redis.Redis, queue: str) -> int:
    """Messages waiting in the queue plus those workers hold unacknowledged."""
    return broker.queue_length(client, queue) + int(client.hlen(UNACKED))


def keys_in_redis(client: redis.Redis, queue: str) -> set[str] | None:
    """Result keys that have a message waiting or held; None when there are too many to look."""
    if messages_in_redis(client, queue) > SCAN_LIMIT:
        return None
    keys = set()
    for raw in client.lrange(queue, 0, -1):
        try:
            keys.update(_key_of(json.loads(raw)))
        except ValueError:
            continue
    for raw in client.hvals(UNACKED):
        try:
            message = json.loads(raw)[0]  # kombu stores [message, exchange, routing key]
        except (ValueError, IndexError, TypeError, KeyError):
            continue
        keys.update(_key_of(message))
    return keys


def _key_of(envelope: object) -> set[str]:
    """The result key a parsed message carries, if it is one of ours (JSON, with a key)."""
    if not isinstance(envelope, dict) or envelope.get("content-type") != "application/json":
        return set()
    try:
        _, kwargs, _ = json.loads(base64.b64decode(envelope["body"]))
        return {kwargs["key"]} if "key" in kwargs else set()
    except (ValueError, KeyError, TypeError):
        return set()


def requeue_stranded(
    db: sa.Engine,
    client: redis.Redis,
    queue: str,
    *,
    older_than_s: float = 60.0,
    batch: str | None = None,
) -> Requeued:
    """Push a fresh message for every pending document that has none in Redis."""
    cutoff = utcnow() - timedelta(seconds=older_than_s)
    query = (
        sa.select(
            results.c.result_key,
            sa.func.min(results.c.content_hash),
            sa.func.min(results.c.batch),
            sa.func.count(),
        )  # fmt: skip
        .where(results.c.status.in_(PENDING), results.c.created_at < cutoff)
        .group_by(results.c.result_key)
    )
    if batch is not None:
        query = query.where(results.c.batch == batch)
    with db.connect() as conn:
        pending = conn.execute(query).all()
    if not pending:
        return Requeued(0, 0, True)
    present = keys_in_redis(client, queue)
    if present is None:
        return Requeued(0, 0, False)
    stranded = [row for row in pending if row[0] not in present]
    if not stranded:
        return Requeued(0, 0, True)
    with db.begin() as conn:  # a running row whose message is gone is waiting again
        conn.execute(
            results.update()
            .where(
                results.c.result_key.in_([row[0] for row in stranded]),
                results.c.status == "running",
            )
            .values(status="queued")
        )
    broker.push(
        client,
        queue,
        (summarize_message(queue, k, d, b) for k, d, b, _ in stranded),
    )
    rows = sum(row[3] for row in stranded)
    log.warning("requeued %d stranded documents (%d rows) with no message in Redis",
                len(stranded), rows)  # fmt: skip
    return Requeued(len(stranded), rows, True)
