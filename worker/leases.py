"""Keeping the queue from handing a document to another worker while this one still has it.

Kombu's Redis transport redelivers an unacknowledged message once it is older
than the visibility timeout. A document waiting its turn in a large engine batch
can be older than that and still be alive, so a thread renews the timestamps of
the messages this worker holds, every quarter of the timeout, and the leases of
the rows it is running (`results.lease_until`), which keep another delivery of
the same document from running it twice. A worker that dies renews nothing, and
its messages and rows come back within one visibility timeout.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable

import redis

from core import redis_state

log = logging.getLogger(__name__)


class Leases:
    def __init__(
        self,
        client: redis.Redis,
        held: Callable[[], Iterable[str]],
        interval_s: float,
        rows: Callable[[], object] = lambda: None,
        beat: Callable[[redis.Redis], object] = lambda client: None,
    ):
        self.client = client
        self.held = held
        self.rows = rows  # renews the leases of the rows in hand
        self.beat = beat  # the worker's heartbeat (core/presence.py)
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leases", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, farewell: Callable[[redis.Redis], object] = lambda client: None) -> None:
        self._stop.set()
        self._thread.join(5)
        with contextlib.suppress(redis.RedisError, OSError):  # else the heartbeat runs out
            farewell(self.client)
        self.client.close()

    def renew(self) -> int:
        return redis_state.renew(self.client, self.held(), time.time())

    def _run(self) -> None:
        self._beat()
        while not self._stop.wait(self.interval_s):
            self._beat()
            try:
                self.renew()
            except (redis.RedisError, OSError) as exc:
                log.warning("could not renew the leases of held messages: %s", exc)
            try:
                self.rows()
            except Exception as exc:  # noqa: BLE001 - the database may be away: next time
                log.warning("could not renew the leases of running rows: %s", exc)

    def _beat(self) -> None:
        try:
            self.beat(self.client)
        except (redis.RedisError, OSError) as exc:
            log.warning("could not send the worker's heartbeat: %s", exc)
