"""Keeping the queue from handing a document to another worker while this one still has it.

Kombu's Redis transport redelivers an unacknowledged message once it is older
than the visibility timeout. A document waiting its turn in a large engine batch
can be older than that and still be alive, so a thread renews the timestamps of
the messages this worker holds, every quarter of the timeout. A worker that dies
renews nothing, and its messages come back within one visibility timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

import redis

from jobs import queue

log = logging.getLogger(__name__)


class Leases:
    def __init__(self, client: redis.Redis, held: Callable[[], Iterable[str]], interval_s: float):
        self.client = client
        self.held = held
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leases", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.client.close()

    def renew(self) -> int:
        return queue.renew(self.client, self.held(), time.time())

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.renew()
            except (redis.RedisError, OSError) as exc:
                log.warning("could not renew the leases of held messages: %s", exc)
