"""The one task: summarize a chunk of documents, named by their result keys. Thin on purpose.

The task hands every key to the drain loop and blocks its pool thread until each
document is written (or handed back), so Celery acknowledges the chunk's message
only after all of its rows are committed. Documents of one chunk join the running
engine one by one, beside the documents of other chunks.
"""

from __future__ import annotations

import logging
from collections import Counter

from celery.exceptions import Reject
from celery.signals import worker_init
from celery.worker.request import Request

from core import messages
from core.tables import Status
from worker import runtime
from worker.app import app
from worker.tickets import Signal
from worker.work import Outcome

log = logging.getLogger(__name__)


class ChunkRequest(Request):
    """A chunk's request, which does not acknowledge on a channel that is gone.

    A chunk can be in hand for minutes. If the connection to Redis was lost meanwhile
    (Redis restarted), the message went with it, and kombu's Redis transport would raise
    while acknowledging it on the closed channel, stopping the worker.
    """

    def _channel_gone(self, doing: str) -> bool:
        """Whether the message's channel closed with its connection; says so in the log."""
        channel = getattr(self._message, "channel", None)
        connection = getattr(channel, "connection", None)
        gone = (
            channel is None
            or getattr(channel, "closed", False)
            or getattr(connection, "client", None) is None
        )
        if gone and not self.acknowledged:
            log.warning(
                "chunk %s: the connection to Redis it came on is gone, so is its message; "
                "not %s it (the requeue sweep finds what it held)",
                self.id,
                doing,
            )
            self.acknowledged = True
        return gone

    def acknowledge(self) -> None:
        if not self._channel_gone("acknowledging"):
            super().acknowledge()

    def reject(self, requeue: bool = False) -> None:
        if not self._channel_gone("putting back"):
            super().reject(requeue)


@app.task(
    name=messages.TASK_NAME,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    Request="worker.tasks:ChunkRequest",
)
def summarize_chunk(self, keys: object = None, **unknown: object) -> dict[str, int]:
    try:
        wanted = messages.unpack(keys)
    except messages.BadMessage as exc:  # acknowledged and dropped: it can never succeed
        log.error("rejected message %s: %s", self.request.id, exc)
        return {"rejected": 1}
    # kombu's Redis transport names an unacknowledged message by this tag; the leases renew it.
    delivery_tag = (self.request.properties or {}).get("delivery_tag")
    drain = runtime.drain()
    urgency = messages.urgency((self.request.delivery_info or {}).get("routing_key"), drain.queue)
    settled = drain.summarize_all(wanted, delivery_tag, urgency).result()
    if Signal.HANDED_BACK in settled:  # stopping: the chunk goes to the front of the queue
        raise Reject("the worker is shutting down", requeue=True)
    written = [s for s in settled if isinstance(s, Outcome)]
    again = [o for o in written if o.status == Status.QUEUED]
    if again:  # failed, with attempts left: these keys back on the queue after a pause
        raise self.retry(
            kwargs={"keys": messages.pack(o.key for o in again)},
            countdown=max(o.retry_in_s or 0 for o in again),
            max_retries=None,
        )
    counts = Counter(o.status for o in written)
    if len(written) < len(settled):
        counts[Signal.SKIPPED.value] = len(settled) - len(written)
    return dict(counts)


@worker_init.connect
def _only_through_summarize_worker(**_: object) -> None:
    if not runtime.installed():
        raise SystemExit(
            "Start the worker with `summarize worker`: it renews the leases of the messages it "
            "holds, puts back documents Redis lost and hands work back on SIGTERM, which "
            "`celery -A worker.app worker` does not."
        )
