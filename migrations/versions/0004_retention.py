"""Retention: document texts that can be dropped, rows that can be purged, slowest rows by index.

- `documents.body` may be NULL: the worker drops a text once no row needs it any
  more (no row of it queued, running or failed), keeping its hash and size,
  unless SUMMARIZE_KEEP_TEXTS is set. A later submit of the same text stores it again.
- `ix_results_content_hash`: which rows use a document, for dropping texts and
  for `summarize purge` (deleting a document checks its references through it).
- `ix_results_slowest`: a batch's generated rows ordered by their time, so the
  dashboard's "slowest documents" reads ten index entries instead of sorting
  every row of the batch. The expression is the one migration 0003 times rows
  with; `jobs/views.document_seconds` spells it for readers, and the query must
  match it word for word to use the index (tests/test_retention.py checks the plan).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import re
from importlib import import_module

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

GENERATED = "status = 'succeeded' AND NOT deduplicated"


def seconds(dialect: str) -> str:
    """A row's time from start to finish in seconds, as migration 0003 buckets it."""
    rollups = import_module("migrations.versions.0003_rollups")
    return rollups._seconds("finished_at", "started_at", dialect)


def _body_nullable(nullable: bool) -> None:
    """PostgreSQL alters the column. SQLite cannot rebuild `documents` while `results` refers
    to it with foreign keys on, so the NOT NULL is taken out of the stored CREATE TABLE text:
    SQLite's documented way to drop a constraint that does not change what is on disk
    (https://sqlite.org/lang_altertable.html#otheralter)."""
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        op.alter_column("documents", "body", existing_type=sa.Text(), nullable=nullable)
        return
    created = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'documents'"
    ).scalar_one()
    old, new = (
        ("body TEXT NOT NULL", "body TEXT") if nullable else ("body TEXT", "body TEXT NOT NULL")
    )
    changed = re.sub(rf"\b{old}\b(?! NOT NULL)", new, created, count=1)
    if changed == created:
        raise RuntimeError(f"documents.body not found as {old!r} in: {created}")
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    bind.exec_driver_sql(
        "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'documents'", (changed,)
    )
    bind.exec_driver_sql(f"PRAGMA schema_version = {version + 1}")
    bind.exec_driver_sql("PRAGMA writable_schema = OFF")


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    _body_nullable(True)
    op.create_index(op.f("ix_results_content_hash"), "results", ["content_hash"])
    op.execute(
        f"CREATE INDEX ix_results_slowest ON results (batch, ({seconds(dialect)})) "
        f"WHERE {GENERATED}"
    )


def downgrade() -> None:
    op.drop_index("ix_results_slowest", table_name="results")
    op.drop_index(op.f("ix_results_content_hash"), table_name="results")
    op.execute("UPDATE documents SET body = '' WHERE body IS NULL")
    _body_nullable(False)
