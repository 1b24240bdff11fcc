"""Whole seconds on SQLite from the text before the fraction, not from a rounded time.

A document's time from start to finish was `strftime('%s', finished_at) - strftime('%s',
started_at)` plus the difference of the fractions. SQLite rounds a time to the millisecond
first, so a time in the last half millisecond of a second (`…:07.999700`) counted as the
next second, and its document took a second more or less than it did: about one time in
two thousand. 0003's expression now cuts the text before its fraction. Here, on SQLite:

- 0003's triggers and the views made of it (`batch_stats`, `daily_stats`), and 0004's
  index `ix_results_slowest` (whose expression the readers repeat word for word), are made
  again with it;
- `duration_counts` is counted again from the rows, so a row filed in the wrong bucket
  before is taken out of the right one when it is deleted or changed.

PostgreSQL subtracts timestamps itself: nothing changes there. A downgrade keeps the
corrected expression (nothing before this revision depended on the error).

The statements are written out here as 0003's and 0004's code made them when this
revision was written, so this migration runs the same SQL whatever later edits do to theirs.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    pass


# On SQLite: the views and 0003's triggers (counting the final statuses of 0009) made again
# with the corrected expression, 0004's index likewise, and `duration_counts` counted again.
STATEMENTS = (
    """
    DROP VIEW IF EXISTS batch_stats
    """,
    """
    DROP VIEW IF EXISTS daily_stats
    """,
    """
    DROP TRIGGER IF EXISTS batches_rollup
    """,
    """
    DROP TRIGGER IF EXISTS results_rollup_insert
    """,
    """
    DROP TRIGGER IF EXISTS results_rollup_insert_day
    """,
    """
    DROP TRIGGER IF EXISTS results_rollup_delete
    """,
    """
    DROP TRIGGER IF EXISTS results_rollup_delete_day
    """,
    """
    DROP TRIGGER IF EXISTS results_rollup_update
    """,
    """
    DROP TRIGGER IF EXISTS results_rollup_update_day_out
    """,
    """
    DROP TRIGGER IF EXISTS results_rollup_update_day_in
    """,
    """
    CREATE TRIGGER batches_rollup AFTER INSERT ON batches BEGIN INSERT INTO batch_rollups (batch) VALUES (NEW.name) ON CONFLICT (batch) DO NOTHING; END
    """,
    """
    CREATE TRIGGER results_rollup_insert AFTER INSERT ON results BEGIN UPDATE batch_rollups SET documents = documents + 1, queued = queued + (CASE WHEN NEW.status = 'queued' THEN 1 ELSE 0 END), running = running + (CASE WHEN NEW.status = 'running' THEN 1 ELSE 0 END), succeeded = succeeded + (CASE WHEN NEW.status = 'succeeded' THEN 1 ELSE 0 END), failed = failed + (CASE WHEN NEW.status = 'failed' THEN 1 ELSE 0 END), cancelled = cancelled + (CASE WHEN NEW.status = 'cancelled' THEN 1 ELSE 0 END), expired = expired + (CASE WHEN NEW.status = 'expired' THEN 1 ELSE 0 END), deduplicated = deduplicated + (CASE WHEN NEW.deduplicated THEN 1 ELSE 0 END), generated = generated + (CASE WHEN (NEW.status = 'succeeded' AND NOT NEW.deduplicated) THEN 1 ELSE 0 END), prompt_tokens = prompt_tokens + (CASE WHEN NEW.deduplicated THEN 0 ELSE COALESCE(NEW.prompt_tokens, 0) END), completion_tokens = completion_tokens + (CASE WHEN NEW.deduplicated THEN 0 ELSE COALESCE(NEW.completion_tokens, 0) END), cached_tokens = cached_tokens + (CASE WHEN NEW.deduplicated THEN 0 ELSE COALESCE(NEW.cached_tokens, 0) END), first_started_at = (CASE WHEN first_started_at IS NULL THEN (CASE WHEN NOT NEW.deduplicated THEN NEW.started_at END) WHEN (CASE WHEN NOT NEW.deduplicated THEN NEW.started_at END) IS NULL OR (CASE WHEN NOT NEW.deduplicated THEN NEW.started_at END) >= first_started_at THEN first_started_at ELSE (CASE WHEN NOT NEW.deduplicated THEN NEW.started_at END) END), last_finished_at = (CASE WHEN last_finished_at IS NULL THEN (CASE WHEN NOT NEW.deduplicated THEN NEW.finished_at END) WHEN (CASE WHEN NOT NEW.deduplicated THEN NEW.finished_at END) IS NULL OR (CASE WHEN NOT NEW.deduplicated THEN NEW.finished_at END) <= last_finished_at THEN last_finished_at ELSE (CASE WHEN NOT NEW.deduplicated THEN NEW.finished_at END) END) WHERE batch = NEW.batch; END
    """,
    """
    CREATE TRIGGER results_rollup_insert_day AFTER INSERT ON results WHEN NEW.finished_at IS NOT NULL BEGIN
        INSERT INTO daily_rollups (day, batch, documents, succeeded, failed, cancelled, expired, deduplicated, generated, prompt_tokens, completion_tokens, cached_tokens, first_started_at, last_finished_at)
        SELECT date(NEW.finished_at), NEW.batch, 1, (CASE WHEN NEW.status = 'succeeded' THEN 1 ELSE 0 END), (CASE WHEN NEW.status = 'failed' THEN 1 ELSE 0 END), (CASE WHEN NEW.status = 'cancelled' THEN 1 ELSE 0 END), (CASE WHEN NEW.status = 'expired' THEN 1 ELSE 0 END), (CASE WHEN NEW.deduplicated THEN 1 ELSE 0 END), (CASE WHEN (NEW.status = 'succeeded' AND NOT NEW.deduplicated) THEN 1 ELSE 0 END), (CASE WHEN NEW.deduplicated THEN 0 ELSE COALESCE(NEW.prompt_tokens, 0) END), (CASE WHEN NEW.deduplicated THEN 0 ELSE COALESCE(NEW.completion_tokens, 0) END), (CASE WHEN NEW.deduplicated THEN 0 ELSE COALESCE(NEW.cached_tokens, 0) END), (CASE WHEN NOT NEW.deduplicated THEN NEW.started_at END), (CASE WHEN NOT NEW.deduplicated THEN NEW.finished_at END)
        WHERE NEW.finished_at IS NOT NULL
        ON CONFLICT (day, batch) DO UPDATE SET documents = daily_rollups.documents + excluded.documents, succeeded = daily_rollups.succeeded + excluded.succeeded, failed = daily_rollups.failed + excluded.failed, cancelled = daily_rollups.cancelled + excluded.cancelled, expired = daily_rollups.expired + excluded.expired, deduplicated = daily_rollups.deduplicated + excluded.deduplicated, generated = daily_rollups.generated + excluded.generated, prompt_tokens = daily_rollups.prompt_tokens + excluded.prompt_tokens, completion_tokens = daily_rollups.completion_tokens + excluded.completion_tokens, cached_tokens = daily_rollups.cached_tokens + excluded.cached_tokens, first_started_at = (CASE WHEN daily_rollups.first_started_at IS NULL THEN excluded.first_started_at WHEN excluded.first_started_at IS NULL OR excluded.first_started_at >= daily_rollups.first_started_at THEN daily_rollups.first_started_at ELSE excluded.first_started_at END), last_finished_at = (CASE WHEN daily_rollups.last_finished_at IS NULL THEN excluded.last_finished_at WHEN excluded.last_finished_at IS NULL OR excluded.last_finished_at <= daily_rollups.last_finished_at THEN daily_rollups.last_finished_at ELSE excluded.last_finished_at END);
        INSERT INTO duration_counts (day, batch, bucket, documents)
        SELECT date(NEW.finished_at), NEW.batch, (SELECT bucket FROM duration_buckets WHERE low_s <= ((CAST(strftime('%s', substr(NEW.finished_at, 1, 19)) AS INTEGER) - CAST(strftime('%s', substr(NEW.started_at, 1, 19)) AS INTEGER)) + (CAST(substr(NEW.finished_at, 20, 7) AS REAL) - CAST(substr(NEW.started_at, 20, 7) AS REAL))) ORDER BY low_s DESC LIMIT 1), 1
        WHERE NEW.finished_at IS NOT NULL AND NEW.started_at IS NOT NULL AND (NEW.status = 'succeeded' AND NOT NEW.deduplicated)
        ON CONFLICT (day, batch, bucket) DO UPDATE SET documents = duration_counts.documents + 1; END
    """,
    """
    CREATE TRIGGER results_rollup_delete AFTER DELETE ON results BEGIN UPDATE batch_rollups SET documents = documents - 1, queued = queued - (CASE WHEN OLD.status = 'queued' THEN 1 ELSE 0 END), running = running - (CASE WHEN OLD.status = 'running' THEN 1 ELSE 0 END), succeeded = succeeded - (CASE WHEN OLD.status = 'succeeded' THEN 1 ELSE 0 END), failed = failed - (CASE WHEN OLD.status = 'failed' THEN 1 ELSE 0 END), cancelled = cancelled - (CASE WHEN OLD.status = 'cancelled' THEN 1 ELSE 0 END), expired = expired - (CASE WHEN OLD.status = 'expired' THEN 1 ELSE 0 END), deduplicated = deduplicated - (CASE WHEN OLD.deduplicated THEN 1 ELSE 0 END), generated = generated - (CASE WHEN (OLD.status = 'succeeded' AND NOT OLD.deduplicated) THEN 1 ELSE 0 END), prompt_tokens = prompt_tokens - (CASE WHEN OLD.deduplicated THEN 0 ELSE COALESCE(OLD.prompt_tokens, 0) END), completion_tokens = completion_tokens - (CASE WHEN OLD.deduplicated THEN 0 ELSE COALESCE(OLD.completion_tokens, 0) END), cached_tokens = cached_tokens - (CASE WHEN OLD.deduplicated THEN 0 ELSE COALESCE(OLD.cached_tokens, 0) END) WHERE batch = OLD.batch; END
    """,
    """
    CREATE TRIGGER results_rollup_delete_day AFTER DELETE ON results WHEN OLD.finished_at IS NOT NULL BEGIN
        UPDATE daily_rollups SET documents = documents - 1, succeeded = succeeded - (CASE WHEN OLD.status = 'succeeded' THEN 1 ELSE 0 END), failed = failed - (CASE WHEN OLD.status = 'failed' THEN 1 ELSE 0 END), cancelled = cancelled - (CASE WHEN OLD.status = 'cancelled' THEN 1 ELSE 0 END), expired = expired - (CASE WHEN OLD.status = 'expired' THEN 1 ELSE 0 END), deduplicated = deduplicated - (CASE WHEN OLD.deduplicated THEN 1 ELSE 0 END), generated = generated - (CASE WHEN (OLD.status = 'succeeded' AND NOT OLD.deduplicated) THEN 1 ELSE 0 END), prompt_tokens = prompt_tokens - (CASE WHEN OLD.deduplicated THEN 0 ELSE COALESCE(OLD.prompt_tokens, 0) END), completion_tokens = completion_tokens - (CASE WHEN OLD.deduplicated THEN 0 ELSE COALESCE(OLD.completion_tokens, 0) END), cached_tokens = cached_tokens - (CASE WHEN OLD.deduplicated THEN 0 ELSE COALESCE(OLD.cached_tokens, 0) END)
        WHERE OLD.finished_at IS NOT NULL AND day = date(OLD.finished_at) AND batch = OLD.batch;
        UPDATE duration_counts SET documents = documents - 1
        WHERE OLD.finished_at IS NOT NULL AND OLD.started_at IS NOT NULL AND (OLD.status = 'succeeded' AND NOT OLD.deduplicated)
            AND day = date(OLD.finished_at) AND batch = OLD.batch AND bucket = (SELECT bucket FROM duration_buckets WHERE low_s <= ((CAST(strftime('%s', substr(OLD.finished_at, 1, 19)) AS INTEGER) - CAST(strftime('%s', substr(OLD.started_at, 1, 19)) AS INTEGER)) + (CAST(substr(OLD.finished_at, 20, 7) AS REAL) - CAST(substr(OLD.started_at, 20, 7) AS REAL))) ORDER BY low_s DESC LIMIT 1); END
    """,
    """
    CREATE TRIGGER results_rollup_update AFTER UPDATE ON results WHEN OLD.status IS NOT NEW.status OR OLD.deduplicated IS NOT NEW.deduplicated OR OLD.started_at IS NOT NEW.started_at OR OLD.finished_at IS NOT NEW.finished_at OR OLD.prompt_tokens IS NOT NEW.prompt_tokens OR OLD.completion_tokens IS NOT NEW.completion_tokens OR OLD.cached_tokens IS NOT NEW.cached_tokens BEGIN UPDATE batch_rollups SET documents = documents + 1 - 1, queued = queued + (CASE WHEN NEW.status = 'queued' THEN 1 ELSE 0 END) - (CASE WHEN OLD.status = 'queued' THEN 1 ELSE 0 END), running = running + (CASE WHEN NEW.status = 'running' THEN 1 ELSE 0 END) - (CASE WHEN OLD.status = 'running' THEN 1 ELSE 0 END), succeeded = succeeded + (CASE WHEN NEW.status = 'succeeded' THEN 1 ELSE 0 END) - (CASE WHEN OLD.status = 'succeeded' THEN 1 ELSE 0 END), failed = failed + (CASE WHEN NEW.status = 'failed' THEN 1 ELSE 0 END) - (CASE WHEN OLD.status = 'failed' THEN 1 ELSE 0 END), cancelled = cancelled + (CASE WHEN NEW.status = 'cancelled' THEN 1 ELSE 0 END) - (CASE WHEN OLD.status = 'cancelled' THEN 1 ELSE 0 END), expired = expired + (CASE WHEN NEW.status = 'expired' THEN 1 ELSE 0 END) - (CASE WHEN OLD.status = 'expired' THEN 1 ELSE 0 END), deduplicated = deduplicated + (CASE WHEN NEW.deduplicated THEN 1 ELSE 0 END) - (CASE WHEN OLD.deduplicated THEN 1 ELSE 0 END), generated = generated + (CASE WHEN (NEW.status = 'succeeded' AND NOT NEW.deduplicated) THEN 1 ELSE 0 END) - (CASE WHEN (OLD.status = 'succeeded' AND NOT OLD.deduplicated) THEN 1 ELSE 0 END), prompt_tokens = prompt_tokens + (CASE WHEN NEW.deduplicated THEN 0 ELSE COALESCE(NEW.prompt_tokens, 0) END) - (CASE WHEN OLD.deduplicated THEN 0 ELSE COALESCE(OLD.prompt_tokens, 0) END), completion_tokens = completion_tokens + (CASE WHEN NEW.deduplicated THEN 0 ELSE COALESCE(NEW.completion_tokens, 0) END) - (CASE WHEN OLD.deduplicated THEN 0 ELSE COALESCE(OLD.completion_tokens, 0) END), cached_tokens = cached_tokens + (CASE WHEN NEW.deduplicated THEN 0 ELSE COALESCE(NEW.cached_tokens, 0) END) - (CASE WHEN OLD.deduplicated THEN 0 ELSE COALESCE(OLD.cached_tokens, 0) END), first_started_at = (CASE WHEN first_started_at IS NULL THEN (CASE WHEN NOT NEW.deduplicated THEN NEW.started_at END) WHEN (CASE WHEN NOT NEW.deduplicated THEN NEW.started_at END) IS NULL OR (CASE WHEN NOT NEW.deduplicated THEN NEW.started_at END) >= first_started_at THEN first_started_at ELSE (CASE WHEN NOT NEW.deduplicated THEN NEW.started_at END) END), last_finished_at = (CASE WHEN last_finished_at IS NULL THEN (CASE WHEN NOT NEW.deduplicated THEN NEW.finished_at END) WHEN (CASE WHEN NOT NEW.deduplicated THEN NEW.finished_at END) IS NULL OR (CASE WHEN NOT NEW.deduplicated THEN NEW.finished_at END) <= last_finished_at THEN last_finished_at ELSE (CASE WHEN NOT NEW.deduplicated THEN NEW.finished_at END) END) WHERE batch = NEW.batch; END
    """,
    """
    CREATE TRIGGER results_rollup_update_day_out AFTER UPDATE ON results WHEN OLD.finished_at IS NOT NULL AND (OLD.status IS NOT NEW.status OR OLD.deduplicated IS NOT NEW.deduplicated OR OLD.started_at IS NOT NEW.started_at OR OLD.finished_at IS NOT NEW.finished_at OR OLD.prompt_tokens IS NOT NEW.prompt_tokens OR OLD.completion_tokens IS NOT NEW.completion_tokens OR OLD.cached_tokens IS NOT NEW.cached_tokens) BEGIN
        UPDATE daily_rollups SET documents = documents - 1, succeeded = succeeded - (CASE WHEN OLD.status = 'succeeded' THEN 1 ELSE 0 END), failed = failed - (CASE WHEN OLD.status = 'failed' THEN 1 ELSE 0 END), cancelled = cancelled - (CASE WHEN OLD.status = 'cancelled' THEN 1 ELSE 0 END), expired = expired - (CASE WHEN OLD.status = 'expired' THEN 1 ELSE 0 END), deduplicated = deduplicated - (CASE WHEN OLD.deduplicated THEN 1 ELSE 0 END), generated = generated - (CASE WHEN (OLD.status = 'succeeded' AND NOT OLD.deduplicated) THEN 1 ELSE 0 END), prompt_tokens = prompt_tokens - (CASE WHEN OLD.deduplicated THEN 0 ELSE COALESCE(OLD.prompt_tokens, 0) END), completion_tokens = completion_tokens - (CASE WHEN OLD.deduplicated THEN 0 ELSE COALESCE(OLD.completion_tokens, 0) END), cached_tokens = cached_tokens - (CASE WHEN OLD.deduplicated THEN 0 ELSE COALESCE(OLD.cached_tokens, 0) END)
        WHERE OLD.finished_at IS NOT NULL AND day = date(OLD.finished_at) AND batch = OLD.batch;
        UPDATE duration_counts SET documents = documents - 1
        WHERE OLD.finished_at IS NOT NULL AND OLD.started_at IS NOT NULL AND (OLD.status = 'succeeded' AND NOT OLD.deduplicated)
            AND day = date(OLD.finished_at) AND batch = OLD.batch AND bucket = (SELECT bucket FROM duration_buckets WHERE low_s <= ((CAST(strftime('%s', substr(OLD.finished_at, 1, 19)) AS INTEGER) - CAST(strftime('%s', substr(OLD.started_at, 1, 19)) AS INTEGER)) + (CAST(substr(OLD.finished_at, 20, 7) AS REAL) - CAST(substr(OLD.started_at, 20, 7) AS REAL))) ORDER BY low_s DESC LIMIT 1); END
    """,
    """
    CREATE TRIGGER results_rollup_update_day_in AFTER UPDATE ON results WHEN NEW.finished_at IS NOT NULL AND (OLD.status IS NOT NEW.status OR OLD.deduplicated IS NOT NEW.deduplicated OR OLD.started_at IS NOT NEW.started_at OR OLD.finished_at IS NOT NEW.finished_at OR OLD.prompt_tokens IS NOT NEW.prompt_tokens OR OLD.completion_tokens IS NOT NEW.completion_tokens OR OLD.cached_tokens IS NOT NEW.cached_tokens) BEGIN
        INSERT INTO daily_rollups (day, batch, documents, succeeded, failed, cancelled, expired, deduplicated, generated, prompt_tokens, completion_tokens, cached_tokens, first_started_at, last_finished_at)
        SELECT date(NEW.finished_at), NEW.batch, 1, (CASE WHEN NEW.status = 'succeeded' THEN 1 ELSE 0 END), (CASE WHEN NEW.status = 'failed' THEN 1 ELSE 0 END), (CASE WHEN NEW.status = 'cancelled' THEN 1 ELSE 0 END), (CASE WHEN NEW.status = 'expired' THEN 1 ELSE 0 END), (CASE WHEN NEW.deduplicated THEN 1 ELSE 0 END), (CASE WHEN (NEW.status = 'succeeded' AND NOT NEW.deduplicated) THEN 1 ELSE 0 END), (CASE WHEN NEW.deduplicated THEN 0 ELSE COALESCE(NEW.prompt_tokens, 0) END), (CASE WHEN NEW.deduplicated THEN 0 ELSE COALESCE(NEW.completion_tokens, 0) END), (CASE WHEN NEW.deduplicated THEN 0 ELSE COALESCE(NEW.cached_tokens, 0) END), (CASE WHEN NOT NEW.deduplicated THEN NEW.started_at END), (CASE WHEN NOT NEW.deduplicated THEN NEW.finished_at END)
        WHERE NEW.finished_at IS NOT NULL
        ON CONFLICT (day, batch) DO UPDATE SET documents = daily_rollups.documents + excluded.documents, succeeded = daily_rollups.succeeded + excluded.succeeded, failed = daily_rollups.failed + excluded.failed, cancelled = daily_rollups.cancelled + excluded.cancelled, expired = daily_rollups.expired + excluded.expired, deduplicated = daily_rollups.deduplicated + excluded.deduplicated, generated = daily_rollups.generated + excluded.generated, prompt_tokens = daily_rollups.prompt_tokens + excluded.prompt_tokens, completion_tokens = daily_rollups.completion_tokens + excluded.completion_tokens, cached_tokens = daily_rollups.cached_tokens + excluded.cached_tokens, first_started_at = (CASE WHEN daily_rollups.first_started_at IS NULL THEN excluded.first_started_at WHEN excluded.first_started_at IS NULL OR excluded.first_started_at >= daily_rollups.first_started_at THEN daily_rollups.first_started_at ELSE excluded.first_started_at END), last_finished_at = (CASE WHEN daily_rollups.last_finished_at IS NULL THEN excluded.last_finished_at WHEN excluded.last_finished_at IS NULL OR excluded.last_finished_at <= daily_rollups.last_finished_at THEN daily_rollups.last_finished_at ELSE excluded.last_finished_at END);
        INSERT INTO duration_counts (day, batch, bucket, documents)
        SELECT date(NEW.finished_at), NEW.batch, (SELECT bucket FROM duration_buckets WHERE low_s <= ((CAST(strftime('%s', substr(NEW.finished_at, 1, 19)) AS INTEGER) - CAST(strftime('%s', substr(NEW.started_at, 1, 19)) AS INTEGER)) + (CAST(substr(NEW.finished_at, 20, 7) AS REAL) - CAST(substr(NEW.started_at, 20, 7) AS REAL))) ORDER BY low_s DESC LIMIT 1), 1
        WHERE NEW.finished_at IS NOT NULL AND NEW.started_at IS NOT NULL AND (NEW.status = 'succeeded' AND NOT NEW.deduplicated)
        ON CONFLICT (day, batch, bucket) DO UPDATE SET documents = duration_counts.documents + 1; END
    """,
    """
    CREATE VIEW batch_stats AS
    SELECT
        t.batch, t.model, t.created_at, t.documents, t.queued, t.running,
        t.succeeded, t.failed, t.cancelled, t.expired, t.deduplicated,
        t.prompt_tokens, t.completion_tokens, t.cached_tokens,
        t.first_started_at, t.last_finished_at, t.wall_s,
        CASE WHEN t.wall_s > 0 THEN t.generated / t.wall_s END AS documents_per_s,
        CASE WHEN t.wall_s > 0 THEN t.completion_tokens / t.wall_s END AS completion_tokens_per_s,
        CASE WHEN t.succeeded + t.failed + t.cancelled + t.expired > 0
            THEN CAST(t.failed AS DOUBLE PRECISION) / (t.succeeded + t.failed + t.cancelled + t.expired)
        END AS failure_rate,
        p.p50_document_s, p.p95_document_s
    FROM (
        SELECT b.name AS batch, b.model, b.created_at,
            COALESCE(r.documents, 0) AS documents,
            COALESCE(r.queued, 0) AS queued, COALESCE(r.running, 0) AS running, COALESCE(r.succeeded, 0) AS succeeded, COALESCE(r.failed, 0) AS failed, COALESCE(r.cancelled, 0) AS cancelled, COALESCE(r.expired, 0) AS expired, COALESCE(r.deduplicated, 0) AS deduplicated, COALESCE(r.generated, 0) AS generated, COALESCE(r.prompt_tokens, 0) AS prompt_tokens, COALESCE(r.completion_tokens, 0) AS completion_tokens, COALESCE(r.cached_tokens, 0) AS cached_tokens,
            r.first_started_at, r.last_finished_at,
            CASE WHEN ((CAST(strftime('%s', substr(r.last_finished_at, 1, 19)) AS INTEGER) - CAST(strftime('%s', substr(r.first_started_at, 1, 19)) AS INTEGER)) + (CAST(substr(r.last_finished_at, 20, 7) AS REAL) - CAST(substr(r.first_started_at, 20, 7) AS REAL))) < 0 THEN 0.0 ELSE ((CAST(strftime('%s', substr(r.last_finished_at, 1, 19)) AS INTEGER) - CAST(strftime('%s', substr(r.first_started_at, 1, 19)) AS INTEGER)) + (CAST(substr(r.last_finished_at, 20, 7) AS REAL) - CAST(substr(r.first_started_at, 20, 7) AS REAL))) END AS wall_s
        FROM batches b LEFT JOIN batch_rollups r ON r.batch = b.name
    ) t
    LEFT JOIN (
        SELECT h.batch,
            MIN(CASE WHEN h.below + h.documents >= (50 * h.n + 99) / 100 THEN k.seconds END)
                AS p50_document_s,
            MIN(CASE WHEN h.below + h.documents >= (95 * h.n + 99) / 100 THEN k.seconds END)
                AS p95_document_s
        FROM (
            SELECT c.batch, c.bucket, c.documents,
                CAST(SUM(c.documents) OVER (PARTITION BY c.batch ORDER BY c.bucket) AS BIGINT)
                    - c.documents AS below,
                CAST(SUM(c.documents) OVER (PARTITION BY c.batch) AS BIGINT) AS n
            FROM (
                SELECT batch, bucket, CAST(SUM(documents) AS BIGINT) AS documents
                FROM duration_counts
                GROUP BY batch, bucket HAVING SUM(documents) > 0
            ) c
        ) h JOIN duration_buckets k ON k.bucket = h.bucket
        GROUP BY h.batch
    ) p ON p.batch = t.batch
    """,
    """
    CREATE VIEW daily_stats AS
    SELECT
        t.day, t.batches, t.documents,
        t.succeeded, t.failed, t.cancelled, t.expired, t.deduplicated,
        t.prompt_tokens, t.completion_tokens, t.cached_tokens,
        t.first_started_at, t.last_finished_at, t.wall_s,
        CASE WHEN t.wall_s > 0 THEN t.generated / t.wall_s END AS documents_per_s,
        CASE WHEN t.wall_s > 0 THEN t.completion_tokens / t.wall_s END AS completion_tokens_per_s,
        CASE WHEN t.succeeded + t.failed + t.cancelled + t.expired > 0
            THEN CAST(t.failed AS DOUBLE PRECISION) / (t.succeeded + t.failed + t.cancelled + t.expired)
        END AS failure_rate,
        p.p50_document_s, p.p95_document_s
    FROM (
        SELECT s.*, CASE WHEN ((CAST(strftime('%s', substr(last_finished_at, 1, 19)) AS INTEGER) - CAST(strftime('%s', substr(first_started_at, 1, 19)) AS INTEGER)) + (CAST(substr(last_finished_at, 20, 7) AS REAL) - CAST(substr(first_started_at, 20, 7) AS REAL))) < 0 THEN 0.0 ELSE ((CAST(strftime('%s', substr(last_finished_at, 1, 19)) AS INTEGER) - CAST(strftime('%s', substr(first_started_at, 1, 19)) AS INTEGER)) + (CAST(substr(last_finished_at, 20, 7) AS REAL) - CAST(substr(first_started_at, 20, 7) AS REAL))) END AS wall_s
        FROM (
            SELECT day, COUNT(*) AS batches, CAST(SUM(documents) AS BIGINT) AS documents, CAST(SUM(succeeded) AS BIGINT) AS succeeded, CAST(SUM(failed) AS BIGINT) AS failed, CAST(SUM(cancelled) AS BIGINT) AS cancelled, CAST(SUM(expired) AS BIGINT) AS expired, CAST(SUM(deduplicated) AS BIGINT) AS deduplicated, CAST(SUM(generated) AS BIGINT) AS generated, CAST(SUM(prompt_tokens) AS BIGINT) AS prompt_tokens, CAST(SUM(completion_tokens) AS BIGINT) AS completion_tokens, CAST(SUM(cached_tokens) AS BIGINT) AS cached_tokens,
                MIN(first_started_at) AS first_started_at, MAX(last_finished_at) AS last_finished_at
            FROM daily_rollups WHERE documents > 0
            GROUP BY day
        ) s
    ) t
    LEFT JOIN (
        SELECT h.day,
            MIN(CASE WHEN h.below + h.documents >= (50 * h.n + 99) / 100 THEN k.seconds END)
                AS p50_document_s,
            MIN(CASE WHEN h.below + h.documents >= (95 * h.n + 99) / 100 THEN k.seconds END)
                AS p95_document_s
        FROM (
            SELECT c.day, c.bucket, c.documents,
                CAST(SUM(c.documents) OVER (PARTITION BY c.day ORDER BY c.bucket) AS BIGINT)
                    - c.documents AS below,
                CAST(SUM(c.documents) OVER (PARTITION BY c.day) AS BIGINT) AS n
            FROM (
                SELECT day, bucket, CAST(SUM(documents) AS BIGINT) AS documents
                FROM duration_counts
                GROUP BY day, bucket HAVING SUM(documents) > 0
            ) c
        ) h JOIN duration_buckets k ON k.bucket = h.bucket
        GROUP BY h.day
    ) p ON p.day = t.day
    """,
    """
    DROP INDEX IF EXISTS ix_results_slowest
    """,
    """
    CREATE INDEX ix_results_slowest ON results (batch, (((CAST(strftime('%s', substr(finished_at, 1, 19)) AS INTEGER) - CAST(strftime('%s', substr(started_at, 1, 19)) AS INTEGER)) + (CAST(substr(finished_at, 20, 7) AS REAL) - CAST(substr(started_at, 20, 7) AS REAL))))) WHERE status = 'succeeded' AND NOT deduplicated
    """,
    """
    DELETE FROM duration_counts
    """,
    """
    INSERT INTO duration_counts (day, batch, bucket, documents)
    SELECT d.day, d.batch, d.bucket, COUNT(*) FROM (
        SELECT date(r.finished_at) AS day, r.batch,
            (SELECT bucket FROM duration_buckets WHERE low_s <= ((CAST(strftime('%s', substr(r.finished_at, 1, 19)) AS INTEGER) - CAST(strftime('%s', substr(r.started_at, 1, 19)) AS INTEGER)) + (CAST(substr(r.finished_at, 20, 7) AS REAL) - CAST(substr(r.started_at, 20, 7) AS REAL))) ORDER BY low_s DESC LIMIT 1) AS bucket
        FROM results r
        WHERE r.finished_at IS NOT NULL AND r.started_at IS NOT NULL AND (r.status = 'succeeded' AND NOT r.deduplicated)
    ) d GROUP BY d.day, d.batch, d.bucket
    """,
)
