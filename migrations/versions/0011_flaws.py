"""A summary's flaw, counted per batch and listed among the summaries worth a look.

- `results.flaw`: why a summary is not usable as it stands (core/quality.py), the first
  of `unparsed` (a --schema batch's JSON that does not parse), `headline` (one short line
  that ends no sentence), `leaked` (a run of the instruction's words) and `repeated` (a
  sentence said twice, or nearly); NULL when none applies, and on rows written before.
- `quality_rollups.flawed`: a batch's summaries with a flaw, kept in step by 0006's
  triggers, made again here to count it; `batch_quality` shows it.
- `flagged`: the summaries that loop, give a number their document does not, or have a
  flaw, with the flaw; its two partial indexes are made again with that condition.

The triggers' and views' SQL is built here, not imported from 0006, so this revision runs
the same SQL whatever later edits do to 0006. On PostgreSQL the `dashboards` role is
granted the new views again (0004's grant_dashboards(), which 0006 left in the database).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

SUMS = ("repetition", "copied", "compression")


def _counted(row: str) -> str:
    """A row whose summary has signals: a succeeded row written since 0005."""
    return f"({row}.status = 'succeeded' AND {row}.looped IS NOT NULL)"


def _flag(condition: str) -> str:
    return f"(CASE WHEN {condition} THEN 1 ELSE 0 END)"


def _shares(row: str, flaws: bool) -> dict[str, str]:
    """What one counted row adds to its batch's rollup, column by column."""
    return {
        "summaries": "1",
        "looped": _flag(f"{row}.looped"),
        "truncated": _flag(f"{row}.finish_reason = 'length'"),
        "novel_numbers": _flag(f"{row}.novel_numbers > 0"),
        **({"flawed": _flag(f"{row}.flaw IS NOT NULL")} if flaws else {}),
        **{f"{s}_sum": f"COALESCE({row}.{s}, 0)" for s in SUMS},
    }


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


SQLITE_TRIGGERS = ("insert", "delete", "update_out", "update_in")
EVENTS = ("insert", "delete", "update")


def _sqlite_triggers(flaws: bool) -> list[str]:
    watched = ["batch", "status", "looped", "finish_reason", "novel_numbers", *SUMS]
    watched += ["flaw"] if flaws else []
    changed = " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in watched)
    add = _add({"batch": "NEW.batch", **_shares("NEW", flaws)})
    take = ", ".join(f"{c} = {c} - {v}" for c, v in _shares("OLD", flaws).items())
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


def _postgresql_apply(rows: str, sign: int, flaws: bool) -> str:
    """A statement's counted rows, from its transition table, in one write per batch."""
    sums = {c: f"({sign}) * SUM({v})" for c, v in _shares("r", flaws).items()}
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


def _postgresql_triggers(flaws: bool) -> list[str]:
    events = {
        "insert": ("INSERT", "NEW TABLE AS new_rows", _postgresql_apply("new_rows", 1, flaws)),
        "delete": ("DELETE", "OLD TABLE AS old_rows", _postgresql_apply("old_rows", -1, flaws)),
        "update": (
            "UPDATE",
            "OLD TABLE AS old_rows NEW TABLE AS new_rows",
            _postgresql_apply("old_rows", -1, flaws)
            + "\n    "
            + _postgresql_apply("new_rows", 1, flaws),
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


def _batch_quality(flaws: bool) -> str:
    counts = ("looped", "truncated", "novel_numbers", *(("flawed",) if flaws else ()))
    return f"""
CREATE VIEW batch_quality AS
SELECT b.name AS batch,
    COALESCE(q.summaries, 0) AS summaries,
    {", ".join(f"COALESCE(q.{c}, 0) AS {c}" for c in counts)},
    {", ".join(_mean(s) for s in SUMS)}
FROM batches b LEFT JOIN quality_rollups q ON q.batch = b.name
"""


def _flagged(flaws: bool) -> tuple[str, str]:
    """The `flagged` condition (word for word in the view and the indexes) and the view."""
    condition = "(looped OR novel_numbers > 0 OR flaw IS NOT NULL)" if flaws else None
    condition = condition or "(looped OR novel_numbers > 0)"
    view = f"""
CREATE VIEW flagged AS
SELECT r.source_path, r.batch, r.looped, r.novel_numbers, r.repetition, r.copied,
    r.finish_reason, r.summary, r.finished_at{", r.flaw" if flaws else ""}
FROM results r
WHERE {condition}
"""
    return condition, view


def _drop(dialect: str) -> None:
    """0006's (or this revision's) triggers, views and partial indexes."""
    for view in ("batch_quality", "flagged"):
        op.execute(f"DROP VIEW IF EXISTS {view}")
    op.execute("DROP INDEX IF EXISTS ix_results_flagged_batch")
    op.execute("DROP INDEX IF EXISTS ix_results_flagged")
    if dialect == "postgresql":
        for event in EVENTS:
            op.execute(f"DROP TRIGGER IF EXISTS results_quality_{event} ON results")
            op.execute(f"DROP FUNCTION IF EXISTS results_quality_{event}()")
    else:
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS results_quality_{name}")


def _make(dialect: str, flaws: bool) -> None:
    triggers = _sqlite_triggers if dialect == "sqlite" else _postgresql_triggers
    for statement in triggers(flaws):
        op.execute(statement)
    op.execute(_batch_quality(flaws))
    condition, view = _flagged(flaws)
    op.execute(f"CREATE INDEX ix_results_flagged ON results (finished_at) WHERE {condition}")
    op.execute(
        f"CREATE INDEX ix_results_flagged_batch ON results (batch, finished_at) WHERE {condition}"
    )
    op.execute(view)
    if dialect == "postgresql":
        op.execute("SELECT grant_dashboards()")


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    _drop(dialect)
    op.add_column("results", sa.Column("flaw", sa.String(length=16), nullable=True))
    op.add_column(
        "quality_rollups", sa.Column("flawed", sa.Integer(), nullable=False, server_default="0")
    )
    _make(dialect, flaws=True)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    _drop(dialect)
    op.execute("ALTER TABLE quality_rollups DROP COLUMN flawed")  # SQLite 3.35+ drops in place
    op.execute("ALTER TABLE results DROP COLUMN flaw")
    _make(dialect, flaws=False)
