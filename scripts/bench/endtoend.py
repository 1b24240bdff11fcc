"""endtoend: one batch of a million generated documents through every step a user runs."""

from __future__ import annotations

import shutil
import subprocess

from scripts.bench.common import (
    SUMMARIZE,
    echo_place,
    empty_postgres_if_asked,
    make_files,
    timed,
)


def run(args) -> dict:
    """`submit`, `worker --burst`, `status` and `results --format jsonl` on one batch of
    --endtoend-docs generated documents (the instant engine), each step's wall time and peak
    memory; the export must hold one line per document."""
    from core import broker
    from core.settings import Settings

    count = args.endtoend_docs
    work, env = echo_place("endtoend")
    settings = Settings.from_env(env)
    steps = {}
    try:
        make_files(work / "files", count, words=150)
        empty_postgres_if_asked(settings, args, "endtoend")
        subprocess.run([*SUMMARIZE, "db", "upgrade"], env=env, check=True, capture_output=True)
        commands = {
            "submit": ["submit", str(work / "files"), "--batch", "nightly"],
            "worker --burst": ["worker", "--burst"],
            "status": ["status", "nightly"],
            "results --format jsonl": ["results", "--batch", "nightly", "--format", "jsonl"],
        }
        for step, command in commands.items():
            out = work / f"{step.split()[0]}.out"
            steps[step] = timed([*SUMMARIZE, *command], env, out)
        with open(work / "results.out", "rb") as exported:
            lines = sum(1 for _ in exported)
        if lines != count:
            raise SystemExit(f"endtoend: the export holds {lines:,} lines for {count:,} documents")
    finally:
        if settings.embedded_broker:
            broker.EmbeddedRedis(settings).stop()
        shutil.rmtree(work, ignore_errors=True)
    return {
        "mode": "endtoend",
        "docs": count,
        "database": settings.database_url.split(":")[0],
        "steps": steps,
    }


def report(result: dict) -> None:
    print(f"endtoend  {result['docs']:>9,} docs ({result['database']}, echo engine):")
    for step, took in result["steps"].items():
        print(
            f"  {took['seconds']:>8.1f} s  {took['peak_rss_mb']:>6.0f} MB peak  {step}",
            flush=True,
        )
