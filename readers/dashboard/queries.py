"""What the dashboard page reads: the views of migration 0002, and a batch's documents.

Everything here is a SELECT on a read-only connection. Values come back as plain
JSON-ready dicts (timestamps as ISO 8601 in UTC), so the page never parses
dialect-specific text.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone

import sqlalchemy as sa
from sqlalchemy.exc import OperationalError

from core import database
from core.errors import SummarizeError
from core.settings import Settings
from core.tables import batches, results
from readers.views import (
    GENERATED,
    VIEWS,
    as_utc,
    batch_quality,
    batch_stats,
    daily_stats,
    document_seconds,
    failures,
    flagged,
)

LATEST_BATCHES = 12  # batches on the front page
DAYS = 30  # days of the tokens-per-day chart
SLOWEST = 10  # documents in a batch's "slowest" list
FAILED = 100  # failed documents listed for a batch
FLAGGED = 100  # flagged summaries listed for a batch, newest first
QUALITY = [c.label(f"quality_{c.name}") for c in batch_quality.columns if c.name != "batch"]


def open_readonly(settings: Settings) -> sa.Engine:
    """An engine that cannot write, over a database that has the views; or what to do."""
    db = database.connect(settings, readonly=True)
    try:
        with db.connect() as conn:
            views = set(sa.inspect(conn).get_view_names())
    except OperationalError as exc:
        db.dispose()
        if db.dialect.name == "sqlite":
            raise SummarizeError(
                f"There is no database to show at {database.describe(settings)}: submit a "
                "batch first (`summarize submit PATH`), or point SUMMARIZE_DATABASE_URL at "
                "the database the workers write to."
            ) from None
        raise database.unavailable(settings, exc) from exc
    missing = sorted(set(VIEWS) - views)
    if missing:
        db.dispose()
        raise SummarizeError(
            f"The database at {database.describe(settings)} has no {', '.join(missing)} "
            f"view{'s' if len(missing) > 1 else ''} yet: run `summarize db upgrade` once, then "
            "start the dashboard again."
        )
    return db


def _plain(row: sa.Row) -> dict:
    """A row as JSON-ready values: timestamps in UTC ISO 8601, days as YYYY-MM-DD."""
    out = {}
    for key, value in row._mapping.items():
        if isinstance(value, datetime):
            value = as_utc(value).isoformat()  # `…+00:00`, as exports and status --json
        elif isinstance(value, date):
            value = value.isoformat()
        out[key] = value
    return out


def overview(db: sa.Engine, latest: int = LATEST_BATCHES, days: int = DAYS) -> dict:
    """The front page: the latest batches, tokens per day, and failures."""
    since = datetime.now(timezone.utc).date() - timedelta(days=days - 1)
    with db.connect() as conn:
        batches = conn.execute(
            sa.select(batch_stats, *QUALITY)
            .join(batch_quality, batch_quality.c.batch == batch_stats.c.batch)
            .order_by(batch_stats.c.created_at.desc(), batch_stats.c.batch.desc())
            .limit(latest)
        ).all()
        daily = conn.execute(
            sa.select(daily_stats).where(daily_stats.c.day >= since).order_by(daily_stats.c.day)
        ).all()
        failed = conn.execute(
            sa.select(sa.func.coalesce(sa.func.sum(batch_stats.c.failed), 0))
        ).scalar_one()
    rows = [_plain(row) for row in batches]
    return {
        "active": any(row["queued"] or row["running"] for row in rows),
        "batches": rows,
        "days": [_plain(row) for row in daily],
        "failures": failed,
    }


def batch_detail(db: sa.Engine, name: str) -> dict | None:
    """One batch: its figures, its slowest documents with their summaries, its failures, and
    its flagged summaries (those that loop, give numbers their document lacks or have a
    flaw)."""
    seconds = sa.literal_column(document_seconds(db.dialect.name))
    with db.connect() as conn:
        stats = conn.execute(
            sa.select(batch_stats, *QUALITY)
            .join(batch_quality, batch_quality.c.batch == batch_stats.c.batch)
            .where(batch_stats.c.batch == name)
        ).first()
        if stats is None:
            return None
        made = conn.execute(
            sa.select(
                batches.c.instruction,
                batches.c.max_tokens,
                batches.c.max_sentences,
                batches.c.metadata,
            ).where(batches.c.name == name)
        ).one()
        marked = conn.execute(
            sa.select(flagged)
            .where(flagged.c.batch == name)
            .order_by(flagged.c.finished_at.desc())
            .limit(FLAGGED)
        ).all()
        slowest = conn.execute(
            sa.select(
                results.c.source_path,
                results.c.started_at,
                results.c.finished_at,
                results.c.prompt_tokens,
                results.c.completion_tokens,
                results.c.parts,
                results.c.finish_reason,
                results.c.summary,
            )
            .where(results.c.batch == name, sa.text(GENERATED))
            .order_by(seconds.desc(), results.c.id)
            .limit(SLOWEST)
        ).all()
        failed = conn.execute(
            sa.select(failures)
            .where(failures.c.batch == name)
            .order_by(failures.c.finished_at.desc(), failures.c.source_path)
            .limit(FAILED)
        ).all()
    documents = []
    for row in slowest:
        took = (row.finished_at - row.started_at).total_seconds()
        documents.append(_plain(row) | {"seconds": took})
    return {
        "batch": _plain(stats),
        "settings": {
            "instruction": made.instruction,
            "max_tokens": made.max_tokens,
            "max_sentences": made.max_sentences,
        },
        "metadata": json.loads(made.metadata) if made.metadata else {},
        "slowest": documents,
        "failed": [_plain(row) for row in failed],
        "flagged": [_plain(row) for row in marked],
    }
