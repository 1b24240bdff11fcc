"""The Celery app of the worker: JSON only, late acknowledgement, a visibility timeout we choose.

Its configuration is the producer's (`core/transport.py`). `summarize worker` is the one
way to run it: `celery -A worker.app worker` is refused at start (see `worker/tasks.py`),
since only `summarize worker` renews the leases of held messages, sweeps for stranded
documents and hands work back on SIGTERM.
"""

from __future__ import annotations

from celery import Celery

from core import transport
from core.settings import Settings

app = Celery("summarize", include=["worker.tasks"])


def configure(settings: Settings) -> Celery:
    app.conf.update(
        transport.celery_config(settings),
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_enable_remote_control=True,
        broker_channel_error_retry=True,
    )
    return app


configure(Settings.from_env())
