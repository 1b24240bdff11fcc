"""`expired`: a status of its own for documents whose batch's --expire-after passed.

Since 0008 they ended `cancelled` with an error starting "expired:". Here:

- `results.status` may be `expired` (the CHECK constraint widened; on SQLite in the
  stored CREATE TABLE text, as 0004 did for `documents.body`).
- `batch_rollups` and `daily_rollups` count them in a column `expired`, and 0003's
  triggers are made again with it; `batch_stats` and `daily_stats` gain the column,
  and their `failure_rate` counts expired documents among the finished ones.
- Rows that expired before this migration become `expired` (the triggers move their
  counts from `cancelled`).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from importlib import import_module

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

ROLLED_UP = ("batch_rollups", "daily_rollups")
VIEWS = ("batch_stats", "daily_stats")
EXPIRED_ERROR = "expired:%"  # how 0008's sweep marked them (core/requeue.py)


def _status_check(final: tuple[str, ...]) -> None:
    bind = op.get_bind()
    rollups = import_module("migrations.versions.0003_rollups")
    check = f"status IN ({', '.join(repr(s) for s in rollups.pending_and(final))})"
    if bind.dialect.name == "postgresql":
        op.execute("ALTER TABLE results DROP CONSTRAINT ck_results_status")
        op.execute(f"ALTER TABLE results ADD CONSTRAINT ck_results_status CHECK ({check})")
        return
    retention = import_module("migrations.versions.0004_retention")
    retention.sqlite_edit_table(
        bind,
        "results",
        r"CONSTRAINT ck_results_status CHECK \([^)]*\)\)",
        f"CONSTRAINT ck_results_status CHECK ({check})",
    )


def _remake(final: tuple[str, ...]) -> None:
    """0003's triggers and views, counting these final statuses."""
    dialect = op.get_bind().dialect.name
    rollups = import_module("migrations.versions.0003_rollups")
    for view in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {view}")
    for statement in rollups.drop_triggers(dialect):
        op.execute(statement)
    for statement in rollups.triggers(dialect, final):
        op.execute(statement)
    op.execute(rollups.batch_stats(dialect, final))
    op.execute(rollups.daily_stats(dialect, final))
    if dialect == "postgresql":
        retention = import_module("migrations.versions.0004_retention")
        quality = import_module("migrations.versions.0006_quality_rollups")
        op.execute(retention.grant_dashboards((*retention.READABLE, *quality.VIEWS)))


def upgrade() -> None:
    rollups = import_module("migrations.versions.0003_rollups")
    final = (*rollups.FINAL_COUNTS, "expired")
    _status_check(final)
    for table in ROLLED_UP:
        op.add_column(table, sa.Column("expired", sa.Integer(), nullable=False, server_default="0"))
    _remake(final)
    op.execute(
        "UPDATE results SET status = 'expired' "
        f"WHERE status = 'cancelled' AND error LIKE '{EXPIRED_ERROR}'"
    )


def downgrade() -> None:
    rollups = import_module("migrations.versions.0003_rollups")
    op.execute("UPDATE results SET status = 'cancelled' WHERE status = 'expired'")
    _remake(rollups.FINAL_COUNTS)
    for table in ROLLED_UP:
        op.execute(f"ALTER TABLE {table} DROP COLUMN expired")
    _status_check(rollups.FINAL_COUNTS)
