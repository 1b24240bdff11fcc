"""What the worker's log says: our own lines, and vLLM's and Celery's only when they matter.

A first run printed 35 lines of vLLM, torch and Celery start-up notices (and 122 more
before the model was saved in bfloat16) around our few. Below
DEBUG, the worker keeps vLLM's warnings and errors but not its INFO lines, and
drops the warnings listed in NOISE: each is about a choice this project made on
purpose, or a hint for vLLM's CPU build, which serves tests here, not users.
vLLM runs parts of its engine in processes of its own; they take this
configuration through VLLM_LOGGING_CONFIG_PATH and the environment.
`summarize worker --loglevel DEBUG` shows everything.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import sys
import tempfile
import warnings

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Warnings that ask nothing of the user, by a piece of their text, with why.
NOISE = (
    "Triton",  # vLLM's CPU build runs without Triton; it says so in five ways
    "Enforce eager set",  # we set it on the CPU build: torch.compile costs minutes there
    "Inductor compilation was disabled",  # the same choice, said again
    "Reset SSM cache type",  # for state-space models; ours are transformers
    "VLLM_CPU_NUM_OF_RESERVED_CPU is less than",  # 0 on purpose: 2.9 against 1.75 docs/s
    "is not found in LD_PRELOAD",  # an allocator hint for the CPU build
    "is set; leaving Torch threads",  # OMP_NUM_THREADS, as vLLM's CPU build sets it itself
    "Passing raw prompts to InputProcessor is deprecated",  # vLLM's own deprecation, not ours
    "workers still running after grace period",  # vLLM stopping its engine processes at exit
    "The global random seed is set to",  # in the worker's process: reseeded after (engine.py)
    "doesn't allow to use `torch.set_num_threads`",  # the CPU build keeps its threads bound
)


class Chatter(logging.Filter):
    """Below DEBUG: drop the warnings in NOISE."""

    def __init__(self, level: str = "INFO"):
        super().__init__()
        self.debug = logging.getLevelName(level.upper()) == logging.DEBUG

    def filter(self, record: logging.LogRecord) -> bool:
        if self.debug or record.levelno >= logging.ERROR:
            return True
        message = record.getMessage()
        return not any(piece in message for piece in NOISE)


def configure(level: str) -> None:
    """Our log on stderr at `level`; vLLM's (in every process of its) and Celery's kept quiet."""
    level = level.upper()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(Chatter(level))
    logging.basicConfig(level=level, handlers=[handler])
    debug = logging.getLevelName(level) == logging.DEBUG
    # vLLM refuses a configuration file when told not to configure logging; a user's own wins
    if os.environ.get("VLLM_CONFIGURE_LOGGING") != "0" and not os.environ.get(
        "VLLM_LOGGING_CONFIG_PATH"
    ):
        os.environ["VLLM_LOGGING_CONFIG_PATH"] = _vllm_config(level, debug)
    if debug:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "DEBUG")  # vLLM's own debug checks too
        return
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # torch's C++ notices (NUMA binding)
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")  # libraries' deprecations
    warnings.simplefilter("ignore", FutureWarning)
    # Celery warns when its worker runs as root because pickled messages could run code;
    # ours accepts JSON only (core/transport.py), so in a container running as root it is noise.
    from celery.exceptions import SecurityWarning

    warnings.simplefilter("ignore", SecurityWarning)


def _vllm_config(level: str, debug: bool) -> str:
    """A logging configuration file for vLLM's processes: its loggers through Chatter."""
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"chatter": {"()": f"{__name__}.Chatter", "level": level}},
        "formatters": {"plain": {"format": FORMAT}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "plain",
                "filters": ["chatter"],
            }
        },
        "loggers": {
            "vllm": {
                "handlers": ["stderr"],
                "level": "DEBUG" if debug else max(level, "WARNING", key=logging.getLevelName),
                "propagate": False,
            }
        },
    }
    handle, path = tempfile.mkstemp(prefix="summarize-vllm-logging-", suffix=".json")
    with os.fdopen(handle, "w") as out:
        json.dump(config, out)
    atexit.register(_remove, path)
    return path


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
