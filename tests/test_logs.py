"""The worker's log holds our lines, and vLLM's and Celery's only where they matter."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from worker.logs import NOISE, Chatter, _vllm_config


def record(message: str, level: int = logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord("vllm.platforms.cpu", level, __file__, 1, message, None, None)


@pytest.mark.parametrize("piece", NOISE)
def test_each_known_notice_is_dropped_below_debug_and_shown_at_debug(piece):
    notice = record(f"something about {piece} and more")
    assert Chatter("INFO").filter(notice) is False
    assert Chatter("WARNING").filter(notice) is False
    assert Chatter("DEBUG").filter(notice) is True


def test_a_warning_nobody_listed_and_every_error_are_kept():
    assert Chatter("INFO").filter(record("Not enough KV cache for max_model_len")) is True
    assert Chatter("INFO").filter(record("Triton exploded", logging.ERROR)) is True


def test_vllm_processes_log_through_the_filter_at_warning_and_above(tmp_path):
    path = _vllm_config("INFO", debug=False)
    script = f"""
import json, logging, logging.config
logging.config.dictConfig(json.load(open({path!r})))
log = logging.getLogger("vllm.v1.worker.cpu_worker")
log.info("loading the model")
log.warning("libtcmalloc is not found in LD_PRELOAD. For best performance, set it")
log.warning("the context was cut to 1024 tokens")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].endswith(
        "WARNING vllm.v1.worker.cpu_worker: the context was cut to 1024 tokens"
    )
