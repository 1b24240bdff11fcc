"""The queue in Redis: every fact about our messages, in one place.

Documents travel in chunks: one Celery task message (`summarize.chunk`) carries
up to `Settings.chunk_size` result keys (SUMMARIZE_CHUNK_DOCS, or the profile's
`max_num_seqs`), made and sent by Celery's own
`send_task` on one producer from the app's pool. Keys are packed as unpadded
base64url of their 32 bytes (43 characters each, no separators): kombu's Redis
transport stores the body base64-encoded again, and a chunk of 64 hex keys would
cost over 100 bytes a document where this costs about 70.

Each model has a queue of its own (`queue_for`): a batch for model X waits where
only workers running X take it. Workers announce themselves with a heartbeat key,
so `status` and `doctor` can say when documents wait for a model no live worker
serves.

Here too: the Celery configuration the producer and the worker share, kombu's
key names for messages workers hold (from the transport options, never literals),
counting what Redis holds, finding the keys it holds, and renewing the leases of
held messages.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import heapq
import json
import re
import ssl
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from urllib.parse import parse_qs, urlsplit

import redis
import sqlalchemy as sa

from core import broker
from core.settings import DEFAULT_MODEL_NAME, MAX_CHUNK_DOCS, Settings

TASK_NAME = "summarize.chunk"
KEY_BYTES = 32  # a result key is a SHA-256
KEY_CHARS = 43  # as unpadded base64url
UNACKED = "unacked"  # kombu's hash of messages workers hold: tag -> [message, exchange, queue]
UNACKED_INDEX = "unacked_index"  # kombu's sorted set of those tags, by when they were taken
RESTORE_EVERY_S = 5  # how often workers look for messages of dead workers
PUBLISH_RETRIES = 3  # send_task's retries while Redis does not answer (about 1.5 s)


HEARTBEAT_S = 15.0  # how often a worker says it is alive; it counts as gone after 3 missed


def queue_for(base: str, model: str) -> str:
    """The queue of a model's documents: SUMMARIZE_QUEUE itself for the default model, and
    `QUEUE.NAME-HASH` for any other (its last path part and a hash of the whole name, so two
    folders both called `model` get two queues)."""
    if model == DEFAULT_MODEL_NAME:
        return base
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", model.rstrip("/").rsplit("/", 1)[-1])[:40]
    return f"{base}.{tail or 'model'}-{hashlib.sha256(model.encode()).hexdigest()[:8]}"


def home(settings: Settings) -> str:
    """The queue this process's model reads from (a worker) and writes to (a producer)."""
    return queue_for(settings.queue, settings.model_name)


class BadMessage(ValueError):
    """A message that is not a chunk of result keys: rejected, logged, never run."""


def pack(keys: Iterable[str]) -> str:
    """Hex result keys as one string of 43-character base64url keys."""
    raw = b"".join(bytes.fromhex(key) for key in keys)
    return "".join(
        base64.urlsafe_b64encode(raw[i : i + KEY_BYTES])[:KEY_CHARS].decode("ascii")
        for i in range(0, len(raw), KEY_BYTES)
    )


def unpack(packed: object) -> list[str]:
    """The hex result keys of a chunk; BadMessage for anything else (checked before use),
    a chunk of more keys than a message may carry among them."""
    if not isinstance(packed, str) or not packed or len(packed) % KEY_CHARS:
        raise BadMessage(f"not a chunk of result keys: {str(packed)[:80]!r}")
    if len(packed) > MAX_CHUNK_DOCS * KEY_CHARS:
        raise BadMessage(
            f"a chunk of {len(packed) // KEY_CHARS:,} result keys, more than a message carries "
            f"({MAX_CHUNK_DOCS:,})"
        )
    keys = []
    for i in range(0, len(packed), KEY_CHARS):
        piece = packed[i : i + KEY_CHARS]
        try:
            raw = base64.b64decode(piece + "=", altchars=b"-_", validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != KEY_BYTES:
            raise BadMessage(f"not a chunk of result keys: {piece!r}")
        keys.append(raw.hex())
    return keys


def chunks(keys: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for key in keys:
        chunk.append(key)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def transport_options(settings: Settings) -> dict:
    return {
        "visibility_timeout": settings.visibility_timeout_s,
        "unacked_key": UNACKED,
        "unacked_index_key": UNACKED_INDEX,
        # Look for messages of dead workers often, so redelivery takes about one timeout.
        "unacked_restore_interval": RESTORE_EVERY_S,
        "unacked_restore_throttle": 1,
        "socket_timeout": 30,
        "socket_connect_timeout": 10,
        "health_check_interval": 10,
    }


def celery_config(settings: Settings) -> dict:
    """What the producer and the worker agree on: JSON only, late acknowledgement, no results.
    A TLS broker's certificate is verified unless its URL says otherwise (kombu alone would
    connect to `rediss://` without checking it)."""
    config = _celery_config(settings)
    if broker.certificate_checks(settings) == "required":  # the URL's other ssl_* options kept
        asked = parse_qs(urlsplit(settings.broker_url).query)
        options = {k: v[-1] for k, v in asked.items() if k.startswith("ssl_")}
        config["broker_use_ssl"] = options | {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    return config


def _celery_config(settings: Settings) -> dict:
    return {
        "broker_url": broker.celery_url(settings),
        "broker_transport_options": transport_options(settings),
        "broker_connection_retry_on_startup": True,
        "broker_connection_max_retries": None,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "event_serializer": "json",
        "result_accept_content": ["json"],
        "task_ignore_result": True,
        "result_backend": None,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": False,
        "task_default_queue": home(settings),
        "task_publish_retry_policy": {
            "max_retries": PUBLISH_RETRIES,
            "interval_start": 0,
            "interval_step": 0.5,
            "interval_max": 0.5,
        },
    }


@lru_cache(maxsize=4)
def _producer_app(settings: Settings):
    from celery import Celery

    app = Celery("summarize-producer", set_as_current=False)
    app.conf.update(celery_config(settings))
    return app


def enqueue(settings: Settings, keys: Iterable[str], model: str | None = None) -> int:
    """Send the keys as chunk messages to the queue of `model` (by default this process's);
    returns how many messages. Raises redis.ConnectionError."""
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
                    queue=target,
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
        enqueue(settings, keys, model)
    except (redis.RedisError, OSError) as exc:
        if undo is not None:
            with db.begin() as conn:
                undo(conn, keys)
        raise broker.unavailable(settings, exc) from exc
    return keys


def marker(queue: str) -> str:
    """A key the requeue sweep keeps in Redis: when it is missing, Redis lost its data."""
    return f"{queue}.kept"


def waiting(client: redis.Redis, queue: str) -> int:
    """Messages waiting in the queue (each a chunk of documents)."""
    return int(client.llen(queue))


def messages_in_redis(client: redis.Redis, queues: str | Iterable[str]) -> int:
    """Messages waiting in the queues plus those workers hold unacknowledged."""
    queues = [queues] if isinstance(queues, str) else list(queues)
    return sum(waiting(client, q) for q in queues) + int(client.hlen(UNACKED))


class KeysInRedis:
    """The result keys that have a message in Redis, kept in 8 bytes a key: a sorted array of
    each key's first 64 bits (a million queued documents: 8 MB, where a set of their hex keys
    took 150 MB). A key whose first 64 bits equal a queued key's is taken as queued (for a
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
    for queue in [queues] if isinstance(queues, str) else queues:
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


def _worker_key(base: str, name: str) -> str:
    return f"{base}.worker:{name}"


def heartbeat(client: redis.Redis, settings: Settings, name: str, since: float) -> None:
    """Say that this worker is alive and which model it serves, for 3 heartbeats."""
    about = {"model": settings.model_name, "queue": home(settings), "since": since}
    client.set(_worker_key(settings.queue, name), json.dumps(about), ex=int(3 * HEARTBEAT_S))


def gone(client: redis.Redis, settings: Settings, name: str) -> None:
    """A worker that stops says so at once."""
    client.delete(_worker_key(settings.queue, name))


def live_workers(client: redis.Redis, base: str) -> dict[str, dict]:
    """The workers whose heartbeat is fresh: {name: {model, queue, since}}."""
    found = {}
    prefix = _worker_key(base, "")
    for key in client.scan_iter(match=prefix + "*", count=1000):  # no glob signs in a queue name
        raw = client.get(key)
        try:
            about = json.loads(raw) if raw else None
        except ValueError:
            about = None
        if isinstance(about, dict):
            name = key.decode() if isinstance(key, bytes) else key
            found[name[len(prefix) :]] = about
    return found


def live_workers_now(settings: Settings) -> dict[str, dict] | None:
    """The live workers, for readers that can do without Redis (`status`, `doctor`): none
    when the embedded Redis is not running (a worker keeps it running; it is not started for
    this), and None when an external Redis does not answer (who can tell)."""
    client = broker.reach(settings)
    if client is None:
        return {} if settings.embedded_broker else None
    try:
        return live_workers(client, settings.queue)
    finally:
        client.close()
