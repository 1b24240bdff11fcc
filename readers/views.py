"""The dashboard views (migration 0002) as typed SQLAlchemy selectables, for Python readers.

The views are SQL, created by `migrations/versions/0002_dashboard_views.py`; they
are not part of `Base.metadata`, so Alembic never tries to create them as tables.
Typing their columns here lets SQLAlchemy turn SQLite's timestamp text into
datetimes, so a reader gets the same values from SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

# p50 and p95 come from a histogram of four buckets per doubling (migration 0003), reported
# at each bucket's geometric middle: within this share of the exact nearest-rank value.
PERCENTILE_ERROR = 2 ** (1 / 8) - 1


def _figures() -> tuple[sa.ColumnClause, ...]:
    """The figures both stats views share (a column can belong to one table only)."""
    return (
        sa.column("succeeded", sa.Integer),
        sa.column("failed", sa.Integer),
        sa.column("cancelled", sa.Integer),
        sa.column("expired", sa.Integer),  # migration 0009
        sa.column("deduplicated", sa.Integer),
        sa.column("prompt_tokens", sa.Integer),
        sa.column("completion_tokens", sa.Integer),
        sa.column("cached_tokens", sa.Integer),
        sa.column("first_started_at", sa.DateTime(timezone=True)),
        sa.column("last_finished_at", sa.DateTime(timezone=True)),
        sa.column("wall_s", sa.Float),
        sa.column("documents_per_s", sa.Float),
        sa.column("completion_tokens_per_s", sa.Float),
        sa.column("failure_rate", sa.Float),
        sa.column("p50_document_s", sa.Float),
        sa.column("p95_document_s", sa.Float),
    )


batch_stats = sa.table(
    "batch_stats",
    sa.column("batch", sa.String),
    sa.column("model", sa.String),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("documents", sa.Integer),
    sa.column("queued", sa.Integer),
    sa.column("running", sa.Integer),
    *_figures(),
)

daily_stats = sa.table(
    "daily_stats",
    sa.column("day", sa.Date),
    sa.column("batches", sa.Integer),
    sa.column("documents", sa.Integer),
    *_figures(),
)

failures = sa.table(
    "failures",
    sa.column("source_path", sa.Text),
    sa.column("batch", sa.String),
    sa.column("content_hash", sa.String),
    sa.column("attempts", sa.Integer),
    sa.column("error", sa.Text),
    sa.column("finished_at", sa.DateTime(timezone=True)),
)

batch_quality = sa.table(
    "batch_quality",
    sa.column("batch", sa.String),
    sa.column("summaries", sa.Integer),
    sa.column("looped", sa.Integer),
    sa.column("truncated", sa.Integer),
    sa.column("novel_numbers", sa.Integer),
    sa.column("flawed", sa.Integer),  # migration 0011
    sa.column("repetition", sa.Float),
    sa.column("copied", sa.Float),
    sa.column("compression", sa.Float),
)

flagged = sa.table(
    "flagged",
    sa.column("source_path", sa.Text),
    sa.column("batch", sa.String),
    sa.column("looped", sa.Boolean),
    sa.column("novel_numbers", sa.Integer),
    sa.column("repetition", sa.Float),
    sa.column("copied", sa.Float),
    sa.column("finish_reason", sa.String),
    sa.column("summary", sa.Text),
    sa.column("finished_at", sa.DateTime(timezone=True)),
    sa.column("flaw", sa.String),  # migration 0011
)

VIEWS = {view.name: view for view in (batch_stats, daily_stats, failures, batch_quality, flagged)}

# A batch's generated rows, as the partial index ix_results_slowest (migration 0004) holds them.
GENERATED = "status = 'succeeded' AND NOT deduplicated"


def document_seconds(dialect: str) -> str:
    """SQL for a row's time from start to finish, word for word as ix_results_slowest indexes it
    (migration 0004): a query that orders by anything else sorts every row of the batch."""
    if dialect == "postgresql":
        return "CAST(EXTRACT(EPOCH FROM (finished_at - started_at)) AS DOUBLE PRECISION)"
    return (
        "((CAST(strftime('%s', substr(finished_at, 1, 19)) AS INTEGER)"
        " - CAST(strftime('%s', substr(started_at, 1, 19)) AS INTEGER))"
        " + (CAST(substr(finished_at, 20, 7) AS REAL) - CAST(substr(started_at, 20, 7) AS REAL)))"
    )


def as_utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes (stored as UTC); PostgreSQL aware ones."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)
