"""Quality per batch: a rollup of the signals, kept in step with the rows, and its view.

- `quality_rollups`: one row per batch that has summaries with signals (0005): how many
  (`summaries`, deduplicated rows included: they are summaries people read too), how
  many loop (`looped`), are cut at the length cap (`truncated`) or give a number the
  document does not (`novel_numbers`), and the sums of `repetition`, `copied` and
  `compression` that the means come from. Triggers keep it in step in the same
  transaction as every row change, as 0003 does for the other figures.
- `batch_quality`: the view readers use (`summarize status`, the dashboard, Grafana):
  every batch, with its counts and the signals' means.
- `flagged`: the view of summaries worth a look: those that still loop, or give a number
  their document does not contain, with their text and signals. Two partial indexes
  hold only such rows, so listing a batch's (or a time range's) newest costs a few
  index entries however many rows `results` has.
- The read-only `dashboards` role may read both views (0004's grant_dashboards).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from importlib import import_module

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

EVENTS = ("insert", "delete", "update")
VIEWS = ("batch_quality", "flagged")
SUMS = ("repetition", "copied", "compression")


def _counted(row: str) -> str:
    """A row whose summary has signals: a succeeded row written since 0005."""
    return f"({row}.status = 'succeeded' AND {row}.looped IS NOT NULL)"


def _flag(condition: str) -> str:
    return f"(CASE WHEN {condition} THEN 1 ELSE 0 END)"


def _shares(row: str) -> dict[str, str]:
    """What one counted row adds to its batch's rollup, column by column."""
    return {
        "summaries": "1",
        "looped": _flag(f"{row}.looped"),
        "truncated": _flag(f"{row}.finish_reason = 'length'"),
        "novel_numbers": _flag(f"{row}.novel_numbers > 0"),
        **{f"{s}_sum": f"COALESCE({row}.{s}, 0)" for s in SUMS},
    }


COLUMNS = tuple(_shares("r"))


def _add(values: dict[str, str], source: str = "") -> str:
    """Upsert shares into the batch's rollup (from a VALUES row, or a SELECT with `source`)."""
    updates = ", ".join(f"{c} = quality_rollups.{c} + excluded.{c}" for c in list(values)[1:])
    rows = (
        f"SELECT {', '.join(values.values())} {source}"
        if source
        else (f"VALUES ({', '.join(values.values())})")
    )
    return (
        f"INSERT INTO quality_rollups (batch, {', '.join(list(values)[1:])}) {rows} "
        f"ON CONFLICT (batch) DO UPDATE SET {updates};"
    )


def _sqlite_triggers() -> list[str]:
    changed = " OR ".join(
        f"OLD.{c} IS NOT NEW.{c}"
        for c in ("batch", "status", "looped", "finish_reason", "novel_numbers", *SUMS)
    )
    add = _add({"batch": "NEW.batch", **_shares("NEW")})
    take = ", ".join(f"{c} = {c} - {v}" for c, v in _shares("OLD").items())
    remove = f"UPDATE quality_rollups SET {take} WHERE batch = OLD.batch;"
    parts = {
        "insert": ("INSERT", _counted("NEW"), add),
        "delete": ("DELETE", _counted("OLD"), remove),
        "update_out": ("UPDATE", f"{_counted('OLD')} AND ({changed})", remove),
        "update_in": ("UPDATE", f"{_counted('NEW')} AND ({changed})", add),
    }
    return [
        f"CREATE TRIGGER results_quality_{name} AFTER {event} ON results WHEN {when} "
        f"BEGIN {body} END"
        for name, (event, when, body) in parts.items()
    ]


def _postgresql_apply(rows: str, sign: int) -> str:
    """A statement's counted rows, from its transition table, in one write per batch."""
    sums = {c: f"({sign}) * SUM({v})" for c, v in _shares("r").items()}
    if sign > 0:
        return _add(
            {"batch": "r.batch", **sums},
            f"FROM {rows} r WHERE {_counted('r')} GROUP BY r.batch",
        )
    sets = ", ".join(f"{c} = q.{c} + s.{c}" for c in sums)
    return (
        f"UPDATE quality_rollups q SET {sets} FROM ("
        f"SELECT r.batch, {', '.join(f'{v} AS {c}' for c, v in sums.items())} "
        f"FROM {rows} r WHERE {_counted('r')} GROUP BY r.batch"
        ") s WHERE q.batch = s.batch;"
    )


def _postgresql_triggers() -> list[str]:
    events = {
        "insert": ("INSERT", "NEW TABLE AS new_rows", _postgresql_apply("new_rows", 1)),
        "delete": ("DELETE", "OLD TABLE AS old_rows", _postgresql_apply("old_rows", -1)),
        "update": (
            "UPDATE",
            "OLD TABLE AS old_rows NEW TABLE AS new_rows",
            _postgresql_apply("old_rows", -1) + "\n    " + _postgresql_apply("new_rows", 1),
        ),
    }
    statements = []
    for name, (event, tables, body) in events.items():
        statements.append(f"""
CREATE FUNCTION results_quality_{name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {body}
    RETURN NULL;
END $$""")
        statements.append(
            f"CREATE TRIGGER results_quality_{name} AFTER {event} ON results "
            f"REFERENCING {tables} FOR EACH STATEMENT EXECUTE FUNCTION results_quality_{name}()"
        )
    return statements


def _mean(column: str) -> str:
    return f"CASE WHEN q.summaries > 0 THEN q.{column}_sum / q.summaries END AS {column}"


BATCH_QUALITY = f"""
CREATE VIEW batch_quality AS
SELECT b.name AS batch,
    COALESCE(q.summaries, 0) AS summaries,
    COALESCE(q.looped, 0) AS looped,
    COALESCE(q.truncated, 0) AS truncated,
    COALESCE(q.novel_numbers, 0) AS novel_numbers,
    {", ".join(_mean(s) for s in SUMS)}
FROM batches b LEFT JOIN quality_rollups q ON q.batch = b.name
"""


FLAGGED = "(looped OR novel_numbers > 0)"  # word for word in the view and the indexes
FLAGGED_VIEW = f"""
CREATE VIEW flagged AS
SELECT r.source_path, r.batch, r.looped, r.novel_numbers, r.repetition, r.copied,
    r.finish_reason, r.summary, r.finished_at
FROM results r
WHERE {FLAGGED}
"""


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.create_table(
        "quality_rollups",
        sa.Column("batch", sa.String(length=200), nullable=False),
        *(
            sa.Column(c, sa.Integer(), nullable=False, server_default="0")
            for c in ("summaries", "looped", "truncated", "novel_numbers")
        ),
        *(sa.Column(f"{s}_sum", sa.Float(), nullable=False, server_default="0") for s in SUMS),
        sa.ForeignKeyConstraint(
            ["batch"],
            ["batches.name"],
            name=op.f("fk_quality_rollups_batch_batches"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("batch", name=op.f("pk_quality_rollups")),
    )
    sums = ", ".join(f"SUM({v})" for v in list(_shares("r").values()))
    op.execute(
        f"INSERT INTO quality_rollups (batch, {', '.join(COLUMNS)}) "
        f"SELECT r.batch, {sums} FROM results r WHERE {_counted('r')} GROUP BY r.batch"
    )
    for statement in _sqlite_triggers() if dialect == "sqlite" else _postgresql_triggers():
        op.execute(statement)
    op.execute(BATCH_QUALITY)
    op.execute(f"CREATE INDEX ix_results_flagged ON results (finished_at) WHERE {FLAGGED}")
    op.execute(
        f"CREATE INDEX ix_results_flagged_batch ON results (batch, finished_at) WHERE {FLAGGED}"
    )
    op.execute(FLAGGED_VIEW)
    if dialect == "postgresql":
        retention = import_module("migrations.versions.0004_retention")
        op.execute(retention.grant_dashboards((*retention.READABLE, *VIEWS)))


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for view in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {view}")
    op.drop_index("ix_results_flagged_batch", table_name="results")
    op.drop_index("ix_results_flagged", table_name="results")
    if dialect == "postgresql":
        for event in EVENTS:
            op.execute(f"DROP TRIGGER IF EXISTS results_quality_{event} ON results")
            op.execute(f"DROP FUNCTION IF EXISTS results_quality_{event}()")
        retention = import_module("migrations.versions.0004_retention")
        op.execute(retention.GRANT_DASHBOARDS)
    else:
        for name in ("insert", "delete", "update_out", "update_in"):
            op.execute(f"DROP TRIGGER IF EXISTS results_quality_{name}")
    op.drop_table("quality_rollups")
