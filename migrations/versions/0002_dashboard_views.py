"""Views for dashboards: batch_stats, daily_stats and failures, read by Grafana and the web page.

They compute in SQL what `summarize status` (readers/status.py) computes in Python, so
every reader sees the same numbers: tokens and speed count only rows that are not
deduplicated, wall time runs from the first start to the last finish of those rows,
and documents per second counts the rows the batch generated itself (succeeded and
not deduplicated). Time per document is finished_at - started_at of generated rows;
p50 and p95 are nearest-rank percentiles (the value at rank ceil(p * n)), computed
with ROW_NUMBER and COUNT windows so both SQLite (3.25+) and PostgreSQL can run them.

Seconds between two timestamps are spelled per dialect. PostgreSQL: EXTRACT(EPOCH ...).
SQLite stores 'YYYY-MM-DD HH:MM:SS.ffffff' text (UTC); julianday() would round to a
millisecond or worse, so whole seconds come from strftime('%s') and the fraction from
the text itself, which keeps microseconds exact and the numbers equal to Python's.

A later migration that rebuilds `results` on SQLite (batch mode: copy, drop, rename)
must drop these views first and create them again after: SQLite refuses to rename a
table into place while a view names a table that is missing.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

VIEWS = ("batch_stats", "daily_stats", "failures")


def _seconds(later: str, earlier: str, dialect: str) -> str:
    """SQL for `later - earlier` in seconds, as a floating-point number."""
    if dialect == "postgresql":
        return f"CAST(EXTRACT(EPOCH FROM ({later} - {earlier})) AS DOUBLE PRECISION)"
    return (
        f"((CAST(strftime('%s', {later}) AS INTEGER) - CAST(strftime('%s', {earlier}) AS INTEGER))"
        f" + (CAST(substr({later}, 20, 7) AS REAL) - CAST(substr({earlier}, 20, 7) AS REAL)))"
    )


def _utc_day(column: str, dialect: str) -> str:
    if dialect == "postgresql":
        return f"CAST(({column} AT TIME ZONE 'UTC') AS DATE)"
    return f"date({column})"


# Sums over rows, shared by the per-batch and the per-day view. `spent` rows cost tokens now.
_TOTALS = """
        SUM(CASE WHEN r.status = 'succeeded' THEN 1 ELSE 0 END) AS succeeded,
        SUM(CASE WHEN r.status = 'failed' THEN 1 ELSE 0 END) AS failed,
        SUM(CASE WHEN r.status = 'cancelled' THEN 1 ELSE 0 END) AS cancelled,
        SUM(CASE WHEN r.deduplicated THEN 1 ELSE 0 END) AS deduplicated,
        COALESCE(SUM(CASE WHEN NOT r.deduplicated THEN r.prompt_tokens ELSE 0 END), 0)
            AS prompt_tokens,
        COALESCE(SUM(CASE WHEN NOT r.deduplicated THEN r.completion_tokens ELSE 0 END), 0)
            AS completion_tokens,
        COALESCE(SUM(CASE WHEN NOT r.deduplicated THEN r.cached_tokens ELSE 0 END), 0)
            AS cached_tokens,
        MIN(CASE WHEN NOT r.deduplicated THEN r.started_at END) AS first_started_at,
        MAX(CASE WHEN NOT r.deduplicated THEN r.finished_at END) AS last_finished_at,
        SUM(CASE WHEN r.status = 'succeeded' AND NOT r.deduplicated THEN 1 ELSE 0 END)
            AS generated"""

# Rates from the totals above, once wall_s is known (in a subquery `t`).
_RATES = """
        t.wall_s,
        CASE WHEN t.wall_s > 0 THEN t.generated / t.wall_s END AS documents_per_s,
        CASE WHEN t.wall_s > 0 THEN t.completion_tokens / t.wall_s END
            AS completion_tokens_per_s,
        CASE WHEN t.succeeded + t.failed + t.cancelled > 0
            THEN CAST(t.failed AS DOUBLE PRECISION) / (t.succeeded + t.failed + t.cancelled)
        END AS failure_rate,
        p.p50_document_s,
        p.p95_document_s"""


def _durations(group: str, group_key: str, dialect: str) -> str:
    """Nearest-rank p50 and p95 of generated rows' time per document, per `group`."""
    seconds = _seconds("r.finished_at", "r.started_at", dialect)
    return f"""
    SELECT d.{group},
        MAX(CASE WHEN d.position = (50 * d.n + 99) / 100 THEN d.seconds END) AS p50_document_s,
        MAX(CASE WHEN d.position = (95 * d.n + 99) / 100 THEN d.seconds END) AS p95_document_s
    FROM (
        SELECT {group_key} AS {group}, {seconds} AS seconds,
            ROW_NUMBER() OVER (PARTITION BY {group_key} ORDER BY {seconds}) AS position,
            COUNT(*) OVER (PARTITION BY {group_key}) AS n
        FROM results r
        WHERE r.status = 'succeeded' AND NOT r.deduplicated
            AND r.started_at IS NOT NULL AND r.finished_at IS NOT NULL
    ) d
    GROUP BY d.{group}"""


def _wall(dialect: str) -> str:
    seconds = _seconds("s.last_finished_at", "s.first_started_at", dialect)
    return f"CASE WHEN {seconds} < 0 THEN 0.0 ELSE {seconds} END AS wall_s"


def batch_stats(dialect: str) -> str:
    """One row per batch, including batches with no rows yet (all counts 0)."""
    return f"""
CREATE VIEW batch_stats AS
SELECT
    t.batch, t.model, t.created_at, t.documents, t.queued, t.running,
    t.succeeded, t.failed, t.cancelled, t.deduplicated,
    t.prompt_tokens, t.completion_tokens, t.cached_tokens,
    t.first_started_at, t.last_finished_at,{_RATES}
FROM (
    SELECT
        b.name AS batch, b.model, b.created_at,
        COALESCE(s.documents, 0) AS documents,
        COALESCE(s.queued, 0) AS queued,
        COALESCE(s.running, 0) AS running,
        COALESCE(s.succeeded, 0) AS succeeded,
        COALESCE(s.failed, 0) AS failed,
        COALESCE(s.cancelled, 0) AS cancelled,
        COALESCE(s.deduplicated, 0) AS deduplicated,
        COALESCE(s.prompt_tokens, 0) AS prompt_tokens,
        COALESCE(s.completion_tokens, 0) AS completion_tokens,
        COALESCE(s.cached_tokens, 0) AS cached_tokens,
        s.first_started_at, s.last_finished_at,
        COALESCE(s.generated, 0) AS generated,
        {_wall(dialect)}
    FROM batches b
    LEFT JOIN (
        SELECT r.batch,
            COUNT(*) AS documents,
            SUM(CASE WHEN r.status = 'queued' THEN 1 ELSE 0 END) AS queued,
            SUM(CASE WHEN r.status = 'running' THEN 1 ELSE 0 END) AS running,{_TOTALS}
        FROM results r
        GROUP BY r.batch
    ) s ON s.batch = b.name
) t
LEFT JOIN ({_durations("batch", "r.batch", dialect)}
) p ON p.batch = t.batch
"""


def daily_stats(dialect: str) -> str:
    """One row per UTC day on which rows finished; a row counts on the day it finished."""
    day = _utc_day("r.finished_at", dialect)
    return f"""
CREATE VIEW daily_stats AS
SELECT
    t.day, t.batches, t.documents,
    t.succeeded, t.failed, t.cancelled, t.deduplicated,
    t.prompt_tokens, t.completion_tokens, t.cached_tokens,
    t.first_started_at, t.last_finished_at,{_RATES}
FROM (
    SELECT s.*, {_wall(dialect)}
    FROM (
        SELECT {day} AS day,
            COUNT(DISTINCT r.batch) AS batches,
            COUNT(*) AS documents,{_TOTALS}
        FROM results r
        WHERE r.finished_at IS NOT NULL
        GROUP BY {day}
    ) s
) t
LEFT JOIN ({_durations("day", day, dialect)}
) p ON p.day = t.day
"""


FAILURES = """
CREATE VIEW failures AS
SELECT r.source_path, r.batch, r.content_hash, r.attempts, r.error, r.finished_at
FROM results r
WHERE r.status = 'failed'
"""


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute(batch_stats(dialect))
    op.execute(daily_stats(dialect))
    op.execute(FAILURES)


def downgrade() -> None:
    for view in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {view}")
