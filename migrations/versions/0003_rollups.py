"""Rollups: per-batch and per-day figures kept in step with `results` by triggers.

The views of 0002 aggregated all of `results` on every read: seconds a request
at a million rows. Here four tables hold the figures instead, and triggers on
`results` and `batches` keep them in step in the same transaction as every row
change (submit, the worker's claims and writes, retry, cancel, requeue, purge,
and any hand-written SQL), so a reader's cost no longer grows with the rows.
The views keep their columns and read the rollups.

- `batch_rollups`: one row per batch, made when the batch is.
- `daily_rollups`: one row per (UTC day a row finished, batch).
- `duration_counts`: generated rows per (day, batch, time bucket): the histogram
  that p50 and p95 come from.
- `duration_buckets`: the fixed buckets, four per doubling from 2^-10 s (about
  1 ms) to 2^17 s (36 h). A percentile is reported as the geometric middle of its
  bucket, within 2^(1/8) - 1 (9.1 %) of the nearest-rank value.

A row counts in a rollup by what it is: an UPDATE takes the old row's share out
and puts the new one's in. `first_started_at` and `last_finished_at` only move
outward (a retried or handed-back document keeps the batch's first start).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

VIEWS = ("batch_stats", "daily_stats", "failures")
BUCKETS_PER_DOUBLING = 4
LOWEST_POWER = -10  # the first bound: 2^-10 s
BOUNDS = 109  # 2^-10 s ... 2^17 s
FINAL_COUNTS = ("succeeded", "failed", "cancelled")
STATUS_COUNTS = ("queued", "running", *FINAL_COUNTS)
# The generators below take the final statuses as `final`, so that a later migration adding a
# status (0009: expired) makes the same triggers and views with one more count.
TOKENS = ("prompt_tokens", "completion_tokens", "cached_tokens")
EVENTS = ("insert", "delete", "update")


def bucket_rows() -> list[dict]:
    """Bucket 0 holds what is faster than the first bound; bucket i starts at bound i-1."""
    bounds = [2 ** (LOWEST_POWER + i / BUCKETS_PER_DOUBLING) for i in range(BOUNDS)]
    rows = [{"bucket": 0, "low_s": -1e12, "high_s": bounds[0], "seconds": bounds[0] / 2}]
    for i, low in enumerate(bounds):
        high = bounds[i + 1] if i + 1 < len(bounds) else None
        middle = (low * high) ** 0.5 if high else low
        rows.append({"bucket": i + 1, "low_s": low, "high_s": high, "seconds": middle})
    return rows


def _seconds(later: str, earlier: str, dialect: str) -> str:
    """SQL for `later - earlier` in seconds (as in 0002: exact to the microsecond on SQLite).

    On SQLite the whole seconds come from the text cut before its fraction: strftime rounds
    to the millisecond, so a time in the last half millisecond of a second counted as the
    next one, and its row took a second more or less (fixed by 0010)."""
    if dialect == "postgresql":
        return f"CAST(EXTRACT(EPOCH FROM ({later} - {earlier})) AS DOUBLE PRECISION)"
    return (
        f"((CAST(strftime('%s', substr({later}, 1, 19)) AS INTEGER)"
        f" - CAST(strftime('%s', substr({earlier}, 1, 19)) AS INTEGER))"
        f" + (CAST(substr({later}, 20, 7) AS REAL) - CAST(substr({earlier}, 20, 7) AS REAL)))"
    )


def _day(column: str, dialect: str) -> str:
    if dialect == "postgresql":
        return f"CAST(({column} AT TIME ZONE 'UTC') AS DATE)"
    return f"date({column})"


def _flag(condition: str) -> str:
    return f"(CASE WHEN {condition} THEN 1 ELSE 0 END)"


def _least(a: str, b: str, dialect: str) -> str:
    if dialect == "postgresql":
        return f"LEAST({a}, {b})"
    return f"(CASE WHEN {a} IS NULL THEN {b} WHEN {b} IS NULL OR {b} >= {a} THEN {a} ELSE {b} END)"


def _greatest(a: str, b: str, dialect: str) -> str:
    if dialect == "postgresql":
        return f"GREATEST({a}, {b})"
    return f"(CASE WHEN {a} IS NULL THEN {b} WHEN {b} IS NULL OR {b} <= {a} THEN {a} ELSE {b} END)"


def _spent(row: str, column: str) -> str:
    """A row's tokens as the rollups count them: not at all when it is deduplicated."""
    return f"(CASE WHEN {row}.deduplicated THEN 0 ELSE COALESCE({row}.{column}, 0) END)"


def _generated(row: str) -> str:
    return f"({row}.status = 'succeeded' AND NOT {row}.deduplicated)"


def _first(row: str) -> str:
    return f"(CASE WHEN NOT {row}.deduplicated THEN {row}.started_at END)"


def _last(row: str) -> str:
    return f"(CASE WHEN NOT {row}.deduplicated THEN {row}.finished_at END)"


def pending_and(final: tuple[str, ...]) -> tuple[str, ...]:
    """Every status a row may have, given the final ones."""
    return ("queued", "running", *final)


def _batch_change(
    old: str | None, new: str | None, dialect: str, final: tuple[str, ...] = FINAL_COUNTS
) -> str:
    """One UPDATE of the batch's rollup: the old row's share out, the new one's in."""

    def delta(term) -> str:
        parts = []
        if new:
            parts.append(f"+ {term(new)}")
        if old:
            parts.append(f"- {term(old)}")
        return " ".join(parts)

    sets = [f"documents = documents {delta(lambda r: '1')}"]
    sets += [
        f"{s} = {s} {delta(lambda r, s=s: _flag(f'{r}.status = {s!r}'))}"
        for s in pending_and(final)
    ]
    sets.append(f"deduplicated = deduplicated {delta(lambda r: _flag(f'{r}.deduplicated'))}")
    sets.append(f"generated = generated {delta(lambda r: _flag(_generated(r)))}")
    sets += [f"{t} = {t} {delta(lambda r, t=t: _spent(r, t))}" for t in TOKENS]
    if new:
        first = _least("first_started_at", _first(new), dialect)
        last = _greatest("last_finished_at", _last(new), dialect)
        sets += [f"first_started_at = {first}", f"last_finished_at = {last}"]
    row = new or old
    return f"UPDATE batch_rollups SET {', '.join(sets)} WHERE batch = {row}.batch;"


def _day_add(row: str, dialect: str, final: tuple[str, ...] = FINAL_COUNTS) -> str:
    """Upsert the finished row's share into its (day, batch) rollup and its duration bucket."""
    day = _day(f"{row}.finished_at", dialect)
    values = {
        "documents": "1",
        **{s: _flag(f"{row}.status = {s!r}") for s in final},
        "deduplicated": _flag(f"{row}.deduplicated"),
        "generated": _flag(_generated(row)),
        **{t: _spent(row, t) for t in TOKENS},
        "first_started_at": _first(row),
        "last_finished_at": _last(row),
    }
    updates = [f"{c} = daily_rollups.{c} + excluded.{c}" for c in list(values)[:-2]]
    updates.append(
        "first_started_at = "
        + _least("daily_rollups.first_started_at", "excluded.first_started_at", dialect)
    )
    updates.append(
        "last_finished_at = "
        + _greatest("daily_rollups.last_finished_at", "excluded.last_finished_at", dialect)
    )
    seconds = _seconds(f"{row}.finished_at", f"{row}.started_at", dialect)
    bucket = _bucket(seconds)
    return f"""
    INSERT INTO daily_rollups (day, batch, {", ".join(values)})
    SELECT {day}, {row}.batch, {", ".join(values.values())}
    WHERE {row}.finished_at IS NOT NULL
    ON CONFLICT (day, batch) DO UPDATE SET {", ".join(updates)};
    INSERT INTO duration_counts (day, batch, bucket, documents)
    SELECT {day}, {row}.batch, {bucket}, 1
    WHERE {row}.finished_at IS NOT NULL AND {row}.started_at IS NOT NULL AND {_generated(row)}
    ON CONFLICT (day, batch, bucket) DO UPDATE SET documents = duration_counts.documents + 1;"""


def _day_remove(row: str, dialect: str, final: tuple[str, ...] = FINAL_COUNTS) -> str:
    """Take a finished row's share back out of its day (its times stay: they only move outward)."""
    day = _day(f"{row}.finished_at", dialect)
    sets = ["documents = documents - 1"]
    sets += [f"{s} = {s} - {_flag(f'{row}.status = {s!r}')}" for s in final]
    sets.append(f"deduplicated = deduplicated - {_flag(f'{row}.deduplicated')}")
    sets.append(f"generated = generated - {_flag(_generated(row))}")
    sets += [f"{t} = {t} - {_spent(row, t)}" for t in TOKENS]
    seconds = _seconds(f"{row}.finished_at", f"{row}.started_at", dialect)
    bucket = _bucket(seconds)
    return f"""
    UPDATE daily_rollups SET {", ".join(sets)}
    WHERE {row}.finished_at IS NOT NULL AND day = {day} AND batch = {row}.batch;
    UPDATE duration_counts SET documents = documents - 1
    WHERE {row}.finished_at IS NOT NULL AND {row}.started_at IS NOT NULL AND {_generated(row)}
        AND day = {day} AND batch = {row}.batch AND bucket = {bucket};"""


def _bucket(seconds: str) -> str:
    """The time bucket of a number of seconds: one index seek in duration_buckets."""
    return (
        f"(SELECT bucket FROM duration_buckets WHERE low_s <= {seconds} "
        "ORDER BY low_s DESC LIMIT 1)"
    )


def _changed(old: str, new: str, dialect: str) -> str:
    """Whether an UPDATE touched anything a rollup counts (an error text alone does not)."""
    differs = "IS DISTINCT FROM" if dialect == "postgresql" else "IS NOT"
    columns = ("status", "deduplicated", "started_at", "finished_at", *TOKENS)
    return " OR ".join(f"{old}.{c} {differs} {new}.{c}" for c in columns)


def _statement_apply(rows: str, sign: int, final: tuple[str, ...] = FINAL_COUNTS) -> str:
    """PostgreSQL: add (or take out) a statement's rows, from its transition table, per batch and
    day in one UPDATE or upsert each: a batch's rollup row is written once per statement, not
    once per row (many writes to one row in one transaction slow PostgreSQL down)."""
    dialect = "postgresql"
    day = _day("r.finished_at", dialect)
    counts = {
        "documents": "COUNT(*)",
        **{s: f"SUM({_flag(f'r.status = {s!r}')})" for s in pending_and(final)},
        "deduplicated": f"SUM({_flag('r.deduplicated')})",
        "generated": f"SUM({_flag(_generated('r'))})",
        **{t: f"SUM({_spent('r', t)})" for t in TOKENS},
    }
    times = {"first_started_at": f"MIN({_first('r')})", "last_finished_at": f"MAX({_last('r')})"}
    if sign < 0:  # times only move outward
        times = dict.fromkeys(times, "CAST(NULL AS TIMESTAMPTZ)")
    batch_sets = [f"{c} = b.{c} + ({sign}) * s.{c}" for c in counts]
    batch_sets += [
        "first_started_at = LEAST(b.first_started_at, s.first_started_at)",
        "last_finished_at = GREATEST(b.last_finished_at, s.last_finished_at)",
    ]
    final = {c: v for c, v in counts.items() if c not in ("queued", "running")}
    day_values = [f"({sign}) * {v}" for v in final.values()] + list(times.values())
    day_sets = [f"{c} = daily_rollups.{c} + excluded.{c}" for c in final]
    day_sets += [
        "first_started_at = LEAST(daily_rollups.first_started_at, excluded.first_started_at)",
        "last_finished_at = GREATEST(daily_rollups.last_finished_at, excluded.last_finished_at)",
    ]
    seconds = _seconds("r.finished_at", "r.started_at", dialect)
    return f"""
    UPDATE batch_rollups b SET {", ".join(batch_sets)}
    FROM (
        SELECT r.batch, {", ".join(f"{v} AS {c}" for c, v in {**counts, **times}.items())}
        FROM {rows} r GROUP BY r.batch
    ) s WHERE b.batch = s.batch;
    INSERT INTO daily_rollups (day, batch, {", ".join(final)}, first_started_at, last_finished_at)
    SELECT {day}, r.batch, {", ".join(day_values)}
    FROM {rows} r WHERE r.finished_at IS NOT NULL GROUP BY {day}, r.batch
    ON CONFLICT (day, batch) DO UPDATE SET {", ".join(day_sets)};
    INSERT INTO duration_counts (day, batch, bucket, documents)
    SELECT d.day, d.batch, d.bucket, ({sign}) * COUNT(*) FROM (
        SELECT {day} AS day, r.batch, {_bucket(seconds)} AS bucket
        FROM {rows} r
        WHERE r.finished_at IS NOT NULL AND r.started_at IS NOT NULL AND {_generated("r")}
    ) d GROUP BY d.day, d.batch, d.bucket
    ON CONFLICT (day, batch, bucket) DO UPDATE
        SET documents = duration_counts.documents + excluded.documents;"""


def _postgresql_triggers(new_batch: str, final: tuple[str, ...] = FINAL_COUNTS) -> list[str]:
    events = {
        "insert": ("INSERT", "NEW TABLE AS new_rows", _statement_apply("new_rows", 1, final)),
        "delete": ("DELETE", "OLD TABLE AS old_rows", _statement_apply("old_rows", -1, final)),
        "update": (
            "UPDATE",
            "OLD TABLE AS old_rows NEW TABLE AS new_rows",
            _statement_apply("old_rows", -1, final) + _statement_apply("new_rows", 1, final),
        ),
    }
    statements = [
        f"""
CREATE FUNCTION batches_rollup() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {new_batch}
    RETURN NULL;
END $$""",
        "CREATE TRIGGER batches_rollup AFTER INSERT ON batches "
        "FOR EACH ROW EXECUTE FUNCTION batches_rollup()",
    ]
    for name, (event, tables, body) in events.items():
        statements.append(f"""
CREATE FUNCTION results_rollup_{name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {body}
    RETURN NULL;
END $$""")
        statements.append(
            f"CREATE TRIGGER results_rollup_{name} AFTER {event} ON results "
            f"REFERENCING {tables} FOR EACH STATEMENT EXECUTE FUNCTION results_rollup_{name}()"
        )
    return statements


def triggers(dialect: str, final: tuple[str, ...] = FINAL_COUNTS) -> list[str]:
    """Each part runs only when it has something to count: most changes touch the batch alone."""
    new_batch = (
        "INSERT INTO batch_rollups (batch) VALUES (NEW.name) ON CONFLICT (batch) DO NOTHING;"
    )
    changed = _changed("OLD", "NEW", dialect)
    if dialect == "postgresql":
        return _postgresql_triggers(new_batch, final)
    parts = {  # name: (event, when, body); SQLite runs triggers of one event in no set order
        "insert": ("INSERT", None, _batch_change(None, "NEW", dialect, final)),
        "insert_day": ("INSERT", "NEW.finished_at IS NOT NULL", _day_add("NEW", dialect, final)),
        "delete": ("DELETE", None, _batch_change("OLD", None, dialect, final)),
        "delete_day": (
            "DELETE",
            "OLD.finished_at IS NOT NULL",
            _day_remove("OLD", dialect, final),
        ),
        "update": ("UPDATE", changed, _batch_change("OLD", "NEW", dialect, final)),
        "update_day_out": (
            "UPDATE",
            f"OLD.finished_at IS NOT NULL AND ({changed})",
            _day_remove("OLD", dialect, final),
        ),
        "update_day_in": (
            "UPDATE",
            f"NEW.finished_at IS NOT NULL AND ({changed})",
            _day_add("NEW", dialect, final),
        ),
    }
    statements = [f"CREATE TRIGGER batches_rollup AFTER INSERT ON batches BEGIN {new_batch} END"]
    for name, (event, when, body) in parts.items():
        condition = f" WHEN {when}" if when else ""
        statements.append(
            f"CREATE TRIGGER results_rollup_{name} AFTER {event} ON results{condition} "
            f"BEGIN {body} END"
        )
    return statements


def drop_triggers(dialect: str) -> list[str]:
    if dialect == "postgresql":
        drops = ["DROP TRIGGER IF EXISTS batches_rollup ON batches"]
        drops += [f"DROP TRIGGER IF EXISTS results_rollup_{e} ON results" for e in EVENTS]
        functions = ["batches_rollup", *(f"results_rollup_{e}" for e in EVENTS)]
        return drops + [f"DROP FUNCTION IF EXISTS {f}()" for f in functions]
    names = [statement.split()[2] for statement in triggers(dialect)]
    return [f"DROP TRIGGER IF EXISTS {name}" for name in names]


def backfill(dialect: str) -> list[str]:
    """Roll up the rows that exist before the triggers (a database from 0002)."""
    spent = {t: f"SUM({_spent('r', t)})" for t in TOKENS}
    day = _day("r.finished_at", dialect)
    seconds = _seconds("r.finished_at", "r.started_at", dialect)
    return [
        f"""
INSERT INTO batch_rollups (batch, documents, {", ".join(STATUS_COUNTS)}, deduplicated, generated,
    {", ".join(TOKENS)}, first_started_at, last_finished_at)
SELECT b.name, COUNT(r.id),
    {", ".join(f"COALESCE(SUM({_flag(f'r.status = {s!r}')}), 0)" for s in STATUS_COUNTS)},
    COALESCE(SUM({_flag("r.deduplicated")}), 0), COALESCE(SUM({_flag(_generated("r"))}), 0),
    {", ".join(f"COALESCE({v}, 0)" for v in spent.values())},
    MIN({_first("r")}), MAX({_last("r")})
FROM batches b LEFT JOIN results r ON r.batch = b.name
GROUP BY b.name""",
        f"""
INSERT INTO daily_rollups (day, batch, documents, {", ".join(FINAL_COUNTS)}, deduplicated,
    generated, {", ".join(TOKENS)}, first_started_at, last_finished_at)
SELECT {day}, r.batch, COUNT(*),
    {", ".join(f"SUM({_flag(f'r.status = {s!r}')})" for s in FINAL_COUNTS)},
    SUM({_flag("r.deduplicated")}), SUM({_flag(_generated("r"))}),
    {", ".join(spent.values())}, MIN({_first("r")}), MAX({_last("r")})
FROM results r WHERE r.finished_at IS NOT NULL
GROUP BY {day}, r.batch""",
        f"""
INSERT INTO duration_counts (day, batch, bucket, documents)
SELECT d.day, d.batch, d.bucket, COUNT(*) FROM (
    SELECT {day} AS day, r.batch,
        {_bucket(seconds)} AS bucket
    FROM results r
    WHERE r.finished_at IS NOT NULL AND r.started_at IS NOT NULL AND {_generated("r")}
) d GROUP BY d.day, d.batch, d.bucket""",
    ]


# The views of 0002, reading the rollups. Their columns and meanings do not change.


def _rates(final: tuple[str, ...]) -> str:
    finished = " + ".join(f"t.{s}" for s in final)
    return f"""
    CASE WHEN t.wall_s > 0 THEN t.generated / t.wall_s END AS documents_per_s,
    CASE WHEN t.wall_s > 0 THEN t.completion_tokens / t.wall_s END AS completion_tokens_per_s,
    CASE WHEN {finished} > 0
        THEN CAST(t.failed AS DOUBLE PRECISION) / ({finished})
    END AS failure_rate"""


def _wall(dialect: str, row: str = "") -> str:
    seconds = _seconds(f"{row}last_finished_at", f"{row}first_started_at", dialect)
    return f"CASE WHEN {seconds} < 0 THEN 0.0 ELSE {seconds} END AS wall_s"


def _percentiles(group: str) -> str:
    """Nearest-rank p50 and p95 from the histogram: the bucket where rank ceil(p * n) falls."""
    return f"""
    SELECT h.{group},
        MIN(CASE WHEN h.below + h.documents >= (50 * h.n + 99) / 100 THEN k.seconds END)
            AS p50_document_s,
        MIN(CASE WHEN h.below + h.documents >= (95 * h.n + 99) / 100 THEN k.seconds END)
            AS p95_document_s
    FROM (
        SELECT c.{group}, c.bucket, c.documents,
            CAST(SUM(c.documents) OVER (PARTITION BY c.{group} ORDER BY c.bucket) AS BIGINT)
                - c.documents AS below,
            CAST(SUM(c.documents) OVER (PARTITION BY c.{group}) AS BIGINT) AS n
        FROM (
            SELECT {group}, bucket, CAST(SUM(documents) AS BIGINT) AS documents
            FROM duration_counts
            GROUP BY {group}, bucket HAVING SUM(documents) > 0
        ) c
    ) h JOIN duration_buckets k ON k.bucket = h.bucket
    GROUP BY h.{group}"""


def batch_stats(dialect: str, final: tuple[str, ...] = FINAL_COUNTS) -> str:
    return f"""
CREATE VIEW batch_stats AS
SELECT
    t.batch, t.model, t.created_at, t.documents, t.queued, t.running,
    {", ".join(f"t.{s}" for s in final)}, t.deduplicated,
    t.prompt_tokens, t.completion_tokens, t.cached_tokens,
    t.first_started_at, t.last_finished_at, t.wall_s,{_rates(final)},
    p.p50_document_s, p.p95_document_s
FROM (
    SELECT b.name AS batch, b.model, b.created_at,
        COALESCE(r.documents, 0) AS documents,
        {", ".join(f"COALESCE(r.{c}, 0) AS {c}" for c in (*pending_and(final), "deduplicated", "generated", *TOKENS))},
        r.first_started_at, r.last_finished_at,
        {_wall(dialect, "r.")}
    FROM batches b LEFT JOIN batch_rollups r ON r.batch = b.name
) t
LEFT JOIN ({_percentiles("batch")}
) p ON p.batch = t.batch
"""  # noqa: E501


def daily_stats(dialect: str, final: tuple[str, ...] = FINAL_COUNTS) -> str:
    summed = (*final, "deduplicated", "generated", *TOKENS)
    sums = ", ".join(f"CAST(SUM({c}) AS BIGINT) AS {c}" for c in summed)
    return f"""
CREATE VIEW daily_stats AS
SELECT
    t.day, t.batches, t.documents,
    {", ".join(f"t.{s}" for s in final)}, t.deduplicated,
    t.prompt_tokens, t.completion_tokens, t.cached_tokens,
    t.first_started_at, t.last_finished_at, t.wall_s,{_rates(final)},
    p.p50_document_s, p.p95_document_s
FROM (
    SELECT s.*, {_wall(dialect)}
    FROM (
        SELECT day, COUNT(*) AS batches, CAST(SUM(documents) AS BIGINT) AS documents, {sums},
            MIN(first_started_at) AS first_started_at, MAX(last_finished_at) AS last_finished_at
        FROM daily_rollups WHERE documents > 0
        GROUP BY day
    ) s
) t
LEFT JOIN ({_percentiles("day")}
) p ON p.day = t.day
"""


FAILURES = """
CREATE VIEW failures AS
SELECT r.source_path, r.batch, r.content_hash, r.attempts, r.error, r.finished_at
FROM results r
WHERE r.status = 'failed'
"""


def _counts() -> list[sa.Column]:
    return [
        sa.Column(c, sa.Integer(), nullable=False, server_default="0")
        for c in (*FINAL_COUNTS, "deduplicated", "generated")
    ] + [sa.Column(t, sa.BigInteger(), nullable=False, server_default="0") for t in TOKENS]


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for view in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {view}")
    buckets = op.create_table(
        "duration_buckets",
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("low_s", sa.Float(), nullable=False),
        sa.Column("high_s", sa.Float(), nullable=True),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("bucket", name=op.f("pk_duration_buckets")),
    )
    op.create_index(op.f("ix_duration_buckets_low_s"), "duration_buckets", ["low_s"])
    op.bulk_insert(buckets, bucket_rows())
    op.create_table(
        "batch_rollups",
        sa.Column("batch", sa.String(length=200), nullable=False),
        sa.Column("documents", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("queued", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("running", sa.Integer(), nullable=False, server_default="0"),
        *_counts(),
        sa.Column("first_started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["batch"],
            ["batches.name"],
            ondelete="CASCADE",
            name=op.f("fk_batch_rollups_batch_batches"),
        ),
        sa.PrimaryKeyConstraint("batch", name=op.f("pk_batch_rollups")),
    )
    op.create_table(
        "daily_rollups",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("batch", sa.String(length=200), nullable=False),
        sa.Column("documents", sa.Integer(), nullable=False, server_default="0"),
        *_counts(),
        sa.Column("first_started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["batch"],
            ["batches.name"],
            ondelete="CASCADE",
            name=op.f("fk_daily_rollups_batch_batches"),
        ),
        sa.PrimaryKeyConstraint("day", "batch", name=op.f("pk_daily_rollups")),
    )
    op.create_table(
        "duration_counts",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("batch", sa.String(length=200), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("documents", sa.Integer(), nullable=False, server_default="0"),
        sa.ForeignKeyConstraint(
            ["batch"],
            ["batches.name"],
            ondelete="CASCADE",
            name=op.f("fk_duration_counts_batch_batches"),
        ),
        sa.PrimaryKeyConstraint("day", "batch", "bucket", name=op.f("pk_duration_counts")),
    )
    op.create_index(op.f("ix_duration_counts_batch"), "duration_counts", ["batch"])
    op.create_index(op.f("ix_daily_rollups_batch"), "daily_rollups", ["batch"])
    # Indexes a status change does not have to touch: each status change used to move a row's
    # entry in three indexes. Pending rows (for the requeue sweep) and failed rows (Grafana's
    # failures by time) get partial indexes; result keys an index of their own.
    op.drop_index("ix_results_result_key_status", table_name="results")
    op.drop_index("ix_results_status_started_at", table_name="results")
    op.create_index(op.f("ix_results_result_key"), "results", ["result_key"])
    pending = sa.text("status IN ('queued', 'running')")
    failed = sa.text("status = 'failed'")
    op.create_index(
        "ix_results_pending",
        "results",
        ["created_at"],
        sqlite_where=pending,
        postgresql_where=pending,
    )
    op.create_index(
        "ix_results_failed",
        "results",
        ["finished_at"],
        sqlite_where=failed,
        postgresql_where=failed,
    )
    for statement in backfill(dialect):
        op.execute(statement)
    for statement in triggers(dialect):
        op.execute(statement)
    op.execute(batch_stats(dialect))
    op.execute(daily_stats(dialect))
    op.execute(FAILURES)


def downgrade() -> None:
    from importlib import import_module

    dialect = op.get_bind().dialect.name
    for view in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {view}")
    for statement in drop_triggers(dialect):
        op.execute(statement)
    op.drop_index("ix_results_failed", table_name="results")
    op.drop_index("ix_results_pending", table_name="results")
    op.drop_index(op.f("ix_results_result_key"), table_name="results")
    op.create_index("ix_results_status_started_at", "results", ["status", "started_at"])
    op.create_index("ix_results_result_key_status", "results", ["result_key", "status"])
    for table in ("duration_counts", "daily_rollups", "batch_rollups", "duration_buckets"):
        op.drop_table(table)
    views = import_module("migrations.versions.0002_dashboard_views")
    op.execute(views.batch_stats(dialect))
    op.execute(views.daily_stats(dialect))
    op.execute(views.FAILURES)
