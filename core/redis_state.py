"""What Redis holds of our messages: how many wait or are held, which result keys they
carry (for the requeue sweep), the marker that tells Redis lost its data, and renewing the
leases of the messages a worker holds."""

from __future__ import annotations

import base64
import heapq
import json
from array import array
from bisect import bisect_left
from collections.abc import Iterable

import redis

from core.messages import lists_of, unpack
from core.transport import UNACKED, UNACKED_INDEX


def marker(queue: str) -> str:
    """A key the requeue sweep keeps in Redis: when it is missing, Redis lost its data."""
    return f"{queue}.kept"


def waiting(client: redis.Redis, queue: str) -> int:
    """Messages waiting in the queue, at every priority (each a chunk of documents)."""
    return sum(int(client.llen(name)) for name in lists_of(queue))


def messages_in_redis(client: redis.Redis, queues: str | Iterable[str]) -> int:
    """Messages waiting in the queues plus those workers hold unacknowledged."""
    queues = [queues] if isinstance(queues, str) else list(queues)
    return sum(waiting(client, q) for q in queues) + int(client.hlen(UNACKED))


class KeysInRedis:
    """The result keys that have a message in Redis, kept in 8 bytes a key: a sorted array of
    each key's first 64 bits (a set of their hex keys takes about twenty times more). A key whose first 64 bits equal a queued key's is taken as queued (for a
    million keys against a million, odds of about one in ten million); it is found stranded
    once the other has left Redis."""

    def __init__(self, runs: Iterable[array]):
        """From sorted runs of fingerprints, merged without a list of them all."""
        self._sorted = array("Q", heapq.merge(*runs))

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        wanted = fingerprint(key)
        at = bisect_left(self._sorted, wanted)
        return at < len(self._sorted) and self._sorted[at] == wanted

    def __len__(self) -> int:
        return len(self._sorted)


def fingerprint(key: str) -> int:
    """A hex result key's first 64 bits."""
    return int(key[:16], 16)


def keys_in_redis(client: redis.Redis, queues: str | Iterable[str], page: int = 100) -> KeysInRedis:
    """Result keys that have a message waiting (in any of the queues) or held, read a page of
    messages at a time."""
    runs: list[array] = []
    for queue in [
        name for q in ([queues] if isinstance(queues, str) else queues) for name in lists_of(q)
    ]:
        start = 0
        while True:
            raw = client.lrange(queue, start, start + page - 1)
            runs.append(_sorted_run(raw))
            if len(raw) < page:
                break
            start += page
    held = []
    for _, message in client.hscan_iter(UNACKED, count=page):
        try:
            held.append(json.loads(message)[0])  # kombu stores [message, exchange, routing key]
        except (ValueError, IndexError, TypeError, KeyError):
            continue
        if len(held) == page:
            runs.append(_sorted_run(held))
            held = []
    runs.append(_sorted_run(held))
    return KeysInRedis(runs)


def _sorted_run(messages: Iterable[object]) -> array:
    """The fingerprints of the keys the messages carry, sorted."""
    return array("Q", sorted(fingerprint(key) for message in messages for key in _keys_of(message)))


def _keys_of(message: object) -> list[str]:
    """The result keys a message carries, if it is one of ours; [] for anything else."""
    try:
        envelope = json.loads(message) if isinstance(message, (bytes, str)) else message
        if not isinstance(envelope, dict) or envelope.get("content-type") != "application/json":
            return []
        _, kwargs, _ = json.loads(base64.b64decode(envelope["body"]))
        return unpack(kwargs.get("keys"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return []


def renew(client: redis.Redis, tags: Iterable[str], now: float) -> int:
    """Mark held messages as taken now, so the transport does not deliver them again."""
    stamps = {tag: now for tag in tags if tag}
    if stamps:
        client.zadd(UNACKED_INDEX, stamps, xx=True)
    return len(stamps)
