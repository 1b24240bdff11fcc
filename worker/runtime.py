"""The one drain loop (and engine) of this worker process.

`summarize worker` builds it at start, before the first message is taken; it is
never built at import, and never per task.
"""

from __future__ import annotations

import contextlib
import gc

from core import database
from core.settings import Settings
from worker import echo
from worker.drain import Drain
from worker.engine import Engine

_drain: Drain | None = None


def build(settings: Settings) -> Drain:
    """Start the drain loop, its thread loading the model into the engine first."""
    from worker.recorder import Recorder

    recorder = Recorder(
        database.ready(settings),
        keep_texts=settings.keep_texts,
        lease_s=settings.visibility_timeout_s,
    )
    with collector_paused():
        return Drain.built_on_its_thread(lambda: build_engine(settings), recorder, settings)


@contextlib.contextmanager
def collector_paused():
    """Python's cycle collector off while the engine is built. Importing torch and vLLM and
    loading the model make objects by the hundred thousand, and each automatic full
    collection walked them all again (13 in a `summarize run`'s start-up, 2.3 s); vLLM's own
    explicit ones still run, over what VllmEngine froze once vLLM was imported: 0.6 s in all
    (docs/performance.md, "The collector at start-up"). It runs as before after the build."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def build_engine(settings: Settings) -> Engine:
    """The instant engine for SUMMARIZE_MODEL=echo; otherwise vLLM with the model loaded."""
    if settings.model_name == echo.MODEL:
        return echo.EchoEngine(settings.profile.max_model_len)
    from core.model import resolve
    from worker.engine import VllmEngine

    model = resolve(settings)
    return VllmEngine(
        model,
        settings.profile,
        settings.model_name,
        settings.tensor_parallel_size,
        statistics=settings.metrics_port is not None,
        dtype=settings.dtype,
    )


def install(drain: Drain) -> None:
    global _drain
    _drain = drain


def installed() -> bool:
    return _drain is not None


def drain() -> Drain:
    if _drain is None:
        raise RuntimeError("no drain loop: the worker was not started by `summarize worker`")
    return _drain
