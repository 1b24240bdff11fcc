"""The Celery app: JSON only, late acknowledgement, and a visibility timeout we choose.

`configure(settings)` is called by `summarize worker` before the worker starts;
importing this module (as `celery -A worker.app` does) configures it from the
environment.
"""

from __future__ import annotations

from celery import Celery

from jobs import broker
from jobs.settings import Settings

app = Celery("summarize", include=["worker.tasks"])


def configure(settings: Settings) -> Celery:
    transport = {
        "visibility_timeout": settings.visibility_timeout_s,
        # Look for messages of dead workers every 5 s, so redelivery takes about one timeout.
        "unacked_restore_interval": 5,
        "unacked_restore_throttle": 1,
        "socket_timeout": 30,
        "socket_connect_timeout": 10,
        "health_check_interval": 10,
    }
    app.conf.update(
        broker_url=broker.celery_url(settings),
        broker_transport_options=transport,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        event_serializer="json",
        result_accept_content=["json"],
        task_ignore_result=True,
        result_backend=None,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=False,
        task_default_queue=settings.queue,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_enable_remote_control=True,
        broker_channel_error_retry=True,
    )
    return app


configure(Settings.from_env())
