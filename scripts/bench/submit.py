"""submit: `summarize submit` alone on many small generated files, and its peak memory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench.common import (
    make_files,
)


def run(args) -> dict:
    figures = {}
    for count in (args.submit_files // 10, args.submit_files):
        work = Path(tempfile.mkdtemp(prefix="summarize-submit-bench-"))
        try:
            folder = work / "files"
            make_files(folder, count)
            env = os.environ | {
                "SUMMARIZE_DATA_DIR": str(work / "data"),
                "SUMMARIZE_QUEUE": f"submit-bench-{os.getpid()}",
            }
            if args.embedded_submit:
                env.pop("SUMMARIZE_BROKER_URL", None)
            # Create the schema first, so the measurement is of submitting alone.
            subprocess.run(
                [sys.executable, "-m", "summarize.cli", "db", "upgrade"],
                env=env,
                check=True,
                capture_output=True,
            )
            started = time.perf_counter()
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "summarize.cli",
                    "submit",
                    str(folder),
                    "--batch",
                    "submit-bench",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            _, status, usage = os.wait4(process.pid, 0)
            seconds = time.perf_counter() - started
            if status != 0:
                raise SystemExit(f"submit failed: {process.stderr.read().decode()[-2000:]}")
            figures[count] = (count / seconds, usage.ru_maxrss / 1024)
            if not env.get("SUMMARIZE_BROKER_URL"):  # submit stops it when idle; be sure
                from core.broker import EmbeddedRedis
                from core.settings import Settings

                EmbeddedRedis(Settings.from_env(env)).stop()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    (small, (_, small_rss)), (large, (rate, large_rss)) = sorted(figures.items())
    return {
        "mode": "submit",
        "files": large,
        "docs_per_s": rate,
        "peak_rss_mb": large_rss,
        "small_files": small,
        "small_peak_rss_mb": small_rss,
    }


def report(result: dict) -> None:
    print(
        f"submit    {result['files']:>7,} files  {result['docs_per_s']:>8,.0f} docs/s  "
        f"peak RSS {result['peak_rss_mb']:.0f} MB ({result['small_files']:,} files: "
        f"{result['small_peak_rss_mb']:.0f} MB)",
        flush=True,
    )
