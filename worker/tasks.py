"""The one task: summarize the document behind a result key. Thin on purpose.

The task blocks its pool thread until the drain loop has written the result, so
Celery acknowledges the message only after the row is committed.
"""

from __future__ import annotations

from celery.exceptions import Reject

from jobs.messages import TASK_NAME
from worker import runtime
from worker.app import app


@app.task(name=TASK_NAME, bind=True, acks_late=True, reject_on_worker_lost=True)
def summarize_document(self, key: str, document: str | None = None, batch: str | None = None):
    # kombu's Redis transport names an unacknowledged message by this tag; the leases renew it.
    delivery_tag = (self.request.properties or {}).get("delivery_tag")
    outcome = runtime.drain().summarize(key, delivery_tag).result()
    if outcome.status == "queued":  # failed, with attempts left: back on the queue after a pause
        raise self.retry(countdown=outcome.retry_in_s, max_retries=None)
    if outcome.status == "handback":  # the worker is stopping: to the front of the queue, now
        raise Reject("the worker is shutting down", requeue=True)
    return outcome.status
