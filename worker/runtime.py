"""The one drain loop (and engine) of this worker process.

`summarize worker` builds it at start, before the first message is taken. A
worker started as `celery -A worker.app worker --pool threads` builds it on its
first task instead. It is never built at import, and never per task.
"""

from __future__ import annotations

import threading

from jobs import database
from jobs.settings import Settings
from worker.drain import Drain

_drain: Drain | None = None
_lock = threading.Lock()


def build(settings: Settings) -> Drain:
    """Load the model into the engine and start the drain loop."""
    from worker.engine import VllmEngine
    from worker.model import resolve
    from worker.recorder import Recorder

    model = resolve(settings)
    db = database.ready(settings)
    engine = VllmEngine(model, settings.profile, settings.model_name, settings.tensor_parallel_size)
    drain = Drain(engine, Recorder(db), settings)
    drain.start()
    return drain


def install(drain: Drain) -> None:
    global _drain
    _drain = drain


def drain() -> Drain:
    global _drain
    if _drain is None:
        with _lock:
            if _drain is None:
                _drain = build(Settings.from_env())
    return _drain
