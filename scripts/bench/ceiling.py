"""ceiling: the pipeline with the model taken out (the instant engine): submit's and the
worker's documents a second, Redis's bytes a queued document, the worker's memory."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from scripts.bench.common import (
    SUMMARIZE,
    database_bytes,
    echo_place,
    empty_postgres_if_asked,
    make_files,
)


def run(args) -> dict:
    import sqlalchemy as sa

    from core import broker, database
    from core.settings import Settings
    from readers.views import batch_stats

    figures = {}
    for count in (args.ceiling_docs // 10, args.ceiling_docs):
        work, env = echo_place(f"ceiling-{count}")
        settings = Settings.from_env(env)
        try:
            make_files(work / "files", count, words=150)
            empty_postgres_if_asked(settings, args, "ceiling")
            subprocess.run([*SUMMARIZE, "db", "upgrade"], env=env, check=True, capture_output=True)
            with broker.session(settings) as client:
                before = client.info("memory")["used_memory"]
                started = time.perf_counter()
                subprocess.run(
                    [*SUMMARIZE, "submit", str(work / "files"), "--batch", "ceiling"],
                    env=env,
                    check=True,
                    capture_output=True,
                )
                submit_s = time.perf_counter() - started
                queued_bytes = client.info("memory")["used_memory"] - before
                log = open(work / "worker.log", "wb")  # noqa: SIM115
                worker = subprocess.Popen(
                    [*SUMMARIZE, "worker", "--burst"], env=env, stdout=log, stderr=log
                )
                _, status, usage = os.wait4(worker.pid, 0)
                log.close()
                if status != 0:
                    raise SystemExit((work / "worker.log").read_text()[-3000:])
            db = database.connect(settings)
            with db.connect() as conn:
                row = conn.execute(
                    sa.select(batch_stats).where(batch_stats.c.batch == "ceiling")
                ).one()
            stored = database_bytes(db)
            db.dispose()
            if row.succeeded != count:
                raise SystemExit(f"ceiling: {row.succeeded} of {count} documents succeeded")
            figures[count] = {
                "submit_docs_per_s": count / submit_s,
                "redis_bytes_per_doc": queued_bytes / count,
                "worker_docs_per_s": row.documents_per_s,
                "worker_peak_rss_mb": usage.ru_maxrss / 1024,
                "database_bytes_per_doc": stored / count,
                "texts_kept": settings.keep_texts,
            }
        finally:
            if settings.embedded_broker:
                broker.EmbeddedRedis(settings).stop()
            shutil.rmtree(work, ignore_errors=True)
    small, large = sorted(figures)
    return {
        "mode": "ceiling",
        "docs": large,
        "small_docs": small,
        "database": settings.database_url.split(":")[0],
        **figures[large],
        "small_worker_peak_rss_mb": figures[small]["worker_peak_rss_mb"],
    }


def report(result: dict) -> None:
    print(
        f"ceiling   {result['docs']:>7,} docs  ({result['database']}, echo engine)  "
        f"worker {result['worker_docs_per_s']:>8,.0f} docs/s  submit "
        f"{result['submit_docs_per_s']:>7,.0f} docs/s  Redis "
        f"{result['redis_bytes_per_doc']:.0f} bytes/doc queued  worker peak RSS "
        f"{result['worker_peak_rss_mb']:.0f} MB ({result['small_docs']:,} docs: "
        f"{result['small_worker_peak_rss_mb']:.0f} MB)  database "
        f"{result['database_bytes_per_doc']:,.0f} bytes/doc (texts "
        f"{'kept' if result['texts_kept'] else 'dropped'})",
        flush=True,
    )
