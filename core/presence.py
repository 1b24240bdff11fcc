"""Which workers are live: each announces itself with a heartbeat key, so `status`,
`doctor` and `submit --wait` can say when documents wait for a model no live worker
serves."""

from __future__ import annotations

import json

import redis

from core import broker
from core.messages import home
from core.settings import Settings

HEARTBEAT_S = 15.0  # how often a worker says it is alive; it counts as gone after 3 missed


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
