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

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from importlib import import_module

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    rollups = import_module("migrations.versions.0003_rollups")
    retention = import_module("migrations.versions.0004_retention")
    expired = import_module("migrations.versions.0009_expired")
    expired._remake((*rollups.FINAL_COUNTS, "expired"))
    op.execute("DROP INDEX IF EXISTS ix_results_slowest")
    op.execute(
        f"CREATE INDEX ix_results_slowest ON results (batch, ({retention.seconds('sqlite')})) "
        f"WHERE {retention.GENERATED}"
    )
    op.execute("DELETE FROM duration_counts")
    op.execute(rollups.backfill("sqlite")[2])


def downgrade() -> None:
    pass
