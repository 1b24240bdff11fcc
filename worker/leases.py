"""Keeping the queue from handing a document to another worker while this one still has it.

Kombu's Redis transport redelivers an unacknowledged message once it is older
than the visibility timeout. A document waiting its turn in a large engine batch
can be older than that and still be alive, so the drain loop renews the
timestamps of the messages it holds. A worker that dies renews nothing, and its
messages come back within one visibility timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import redis

log = logging.getLogger(__name__)

UNACKED_INDEX = "unacked_index"  # kombu's sorted set of unacknowledged delivery tags


class Leases:
    def __init__(self, client: redis.Redis):
        self.client = client

    def renew(self, delivery_tags: Iterable[str | None]) -> None:
        now = time.time()
        tags = {tag: now for tag in delivery_tags if tag}
        if not tags:
            return
        try:
            self.client.zadd(UNACKED_INDEX, tags, xx=True)
        except (redis.RedisError, OSError) as exc:
            log.warning("could not renew %d message leases: %s", len(tags), exc)

    def close(self) -> None:
        self.client.close()
