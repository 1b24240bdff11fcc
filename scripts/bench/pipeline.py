"""pipeline: the real path, submit into Redis, a running worker, rows in the database."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from scripts.bench.common import (
    SAMPLES,
    SUMMARIZE,
    documents,
    running_worker,
)


def run(args) -> dict:
    import sqlalchemy as sa

    from core import database
    from core.settings import Settings
    from core.tables import results
    from readers.views import as_utc

    work = Path(tempfile.mkdtemp(prefix="summarize-bench-"))
    # SUMMARIZE_MAX_TOKENS is in os.environ already; with no SUMMARIZE_DATABASE_URL the
    # database is a SQLite file in this data folder.
    env = os.environ | {
        "SUMMARIZE_DATA_DIR": str(work / "data"),
        "SUMMARIZE_QUEUE": f"bench-{os.getpid()}",
    }
    if "SUMMARIZE_MODEL" not in os.environ:
        env["SUMMARIZE_MODEL"] = str(Settings.from_env().default_model_dir)
    corpus = work / "corpus"
    corpus.mkdir()
    for i, text in enumerate(documents(args.corpus, args.docs)):
        (corpus / f"{i:06d}.txt").write_text(text, encoding="utf-8")
    with running_worker(env, work):
        subprocess.run(
            [
                *SUMMARIZE,
                "submit",
                str(SAMPLES),
                "--batch",
                "warm-up",
                "--wait",
                "--timeout",
                "900",
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        started = time.time()
        done = subprocess.run(
            [*SUMMARIZE, "submit", str(corpus), "--batch", "bench", "--wait", "--timeout", "7200"],
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:  # --wait exits non-zero unless every document succeeded
            raise SystemExit(f"the bench batch did not all succeed:\n{done.stderr[-3000:]}")
        db = database.connect(Settings.from_env(env))
        with db.connect() as conn:
            row = conn.execute(
                sa.select(
                    sa.func.count(),
                    sa.func.sum(results.c.completion_tokens),
                    sa.func.max(results.c.finished_at),
                    sa.func.sum(sa.case((results.c.finish_reason == "stop", 1), else_=0)),
                    sa.func.sum(sa.case((results.c.looped, 1), else_=0)),
                ).where(results.c.batch == "bench")
            ).one()
        db.dispose()
        seconds = as_utc(row[2]).timestamp() - started  # SQLite keeps no time zone; we write UTC
        return {
            "mode": "pipeline",
            "docs": row[0],
            "seconds": seconds,
            "output_tokens": int(row[1]),
            "stopped": int(row[3]),
            "looped": int(row[4]),
        }
