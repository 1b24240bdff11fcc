"""readers: the dashboards, status, batches and each Grafana panel's query over millions of
rows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from scripts.bench.common import (
    ROOT,
    SUMMARIZE,
    empty_postgres_if_asked,
    make_files,
)


def run(args) -> dict:
    """Fill `results` through the product's paths, then time every reader against it.

    A corpus of --readers-base documents is submitted and drained by the instant engine,
    then submitted again under other batch names (deduplication answers those rows at
    submit) until `results` holds --readers-rows rows. --readers-dir keeps the data for
    another run.
    """
    from core import broker, database
    from core.settings import Settings

    work = Path(args.readers_dir or tempfile.mkdtemp(prefix="summarize-readers-"))
    env = os.environ | {
        "SUMMARIZE_DATA_DIR": str(work / "data"),
        "SUMMARIZE_MODEL": "echo",
        "SUMMARIZE_QUEUE": "readers",
    }
    settings = Settings.from_env(env)
    try:
        if not (work / "files").exists():
            empty_postgres_if_asked(settings, args, "readers")
            make_files(work / "files", args.readers_base, words=40)
        db = database.ready(settings)
        with broker.session(settings):
            night = _rows(db) // args.readers_base
            while _rows(db) < args.readers_rows:
                started = time.perf_counter()
                subprocess.run(
                    [*SUMMARIZE, "submit", str(work / "files"), "--batch", f"night-{night:03d}"],
                    env=env,
                    check=True,
                    capture_output=True,
                )
                if night == 0:
                    subprocess.run(
                        [*SUMMARIZE, "worker", "--burst"], env=env, check=True, capture_output=True
                    )
                print(
                    f"  readers: {_rows(db):,} rows ({time.perf_counter() - started:.0f} s)",
                    flush=True,
                )
                night += 1
        timings = {name: _median_ms(read) for name, read in _readers(settings, db).items()}
        rows = _rows(db)
        db.dispose()
    finally:
        if settings.embedded_broker:
            broker.EmbeddedRedis(settings).stop()
        if not args.readers_dir:
            shutil.rmtree(work, ignore_errors=True)
    return {
        "mode": "readers",
        "rows": rows,
        "database": settings.database_url.split(":")[0],
        "ms": timings,
    }


def _rows(db) -> int:
    import sqlalchemy as sa

    with db.connect() as conn:
        return conn.execute(
            sa.text("SELECT coalesce(sum(documents), 0) FROM batch_rollups")
        ).scalar()


def _median_ms(read, times: int = 7) -> float:
    read()  # warm: the first read pays for the connection and the page cache
    took = []
    for _ in range(times):
        started = time.perf_counter()
        read()
        took.append((time.perf_counter() - started) * 1000)
    return sorted(took)[times // 2]


def _readers(settings, db) -> dict:
    """Each reader a user meets: the dashboard's endpoints, status, batches, Grafana's panels,
    and the API's batch object (night-000 made an API batch of the local user)."""
    import re

    import sqlalchemy as sa
    from starlette.testclient import TestClient

    from api.app import LOCAL
    from api.app import create_app as api_app
    from core.tables import api_batches, utcnow
    from readers import status
    from readers.dashboard.app import create_app

    client = TestClient(create_app(db))
    with db.begin() as conn:
        if not conn.execute(
            sa.select(api_batches.c.id).where(api_batches.c.id == "night-000")
        ).first():
            conn.execute(
                api_batches.insert().values(
                    id="night-000",
                    owner=LOCAL,
                    input_file_id="file-bench",
                    endpoint="/v1/chat/completions",
                    completion_window="24h",
                    created_at=utcnow(),
                    in_progress_at=utcnow(),
                )
            )
    api = TestClient(api_app(settings, db, None, open_to_any_key=True))
    bearer = {"Authorization": "Bearer bench"}

    def get(path):
        return lambda: client.get(path).raise_for_status()

    readers = {
        "/api/overview": get("/api/overview"),
        "/api/batches/night-000 (generated)": get("/api/batches/night-000"),
        "/api/batches/night-001 (deduplicated)": get("/api/batches/night-001"),
        "GET /v1/batches/night-000 (the API's batch object)": lambda: api.get(
            "/v1/batches/night-000", headers=bearer
        ).raise_for_status(),
        "summarize status": lambda: status.batch_status(db, status.latest_batches(db, 5)),
        "summarize batches": lambda: status.batch_status(db, status.latest_batches(db, 20)),
    }
    since = "'2000-01-01'"
    grafana = json.loads((ROOT / "deploy/grafana/dashboards/summarize.json").read_text())
    for panel in grafana["panels"]:
        for target in panel.get("targets", []):
            if "rawSql" not in target:  # a Prometheus panel: it reads the workers, not SQL
                continue
            sql = re.sub(r"\$__timeFilter\(([\w.]+)\)", rf"\1 >= {since}", target["rawSql"])

            def query(sql=sql):
                with db.connect() as conn:
                    conn.execute(sa.text(sql)).all()

            readers[f"grafana: {panel['title']}"] = query
    return readers


def report(result: dict) -> None:
    print(f"readers   {result['rows']:>9,} rows ({result['database']}), median of 7:")
    for name, ms in result["ms"].items():
        print(f"  {ms:>8.1f} ms  {name}", flush=True)
