"""startup: `summarize --help` in a fresh process, what every producer command pays first."""

from __future__ import annotations

import subprocess
import sys
import time


def run(args) -> dict:
    """Median wall time of `summarize --help` in a fresh process (the producer side imports
    neither vLLM, torch nor Celery's worker: tests/test_cli.py holds that)."""
    took = []
    for _ in range(7):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "summarize.cli", "--help"], check=True, capture_output=True
        )
        took.append(time.perf_counter() - started)
    return {"mode": "startup", "median_s": sorted(took)[3]}


def report(result: dict) -> None:
    print(f"startup   summarize --help in {result['median_s'] * 1000:.0f} ms (median of 7)")
