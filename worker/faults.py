"""Failpoints for fault tests: make the worker die the way a driver fault or the OOM killer would.

Set SUMMARIZE_TEST_CRASH_ON to a piece of text, and a worker that takes on a
document containing it is killed with SIGKILL right after adding it to the
engine, with the rest of its batch in flight. Never set it in production.
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)

_CRASH_ON = os.environ.get("SUMMARIZE_TEST_CRASH_ON") or None


def crash_if_poison(text: str) -> None:
    if _CRASH_ON is not None and _CRASH_ON in text:
        log.critical("SUMMARIZE_TEST_CRASH_ON matched a document: killing this worker")
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
