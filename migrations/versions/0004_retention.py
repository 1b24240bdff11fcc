"""Retention: document texts that can be dropped, rows that can be purged, slowest rows by index.

- `documents.body` may be NULL: the worker drops a text once no row needs it any
  more (no row of it queued, running or failed), keeping its hash and size,
  unless SUMMARIZE_KEEP_TEXTS is set. A later submit of the same text stores it again.
- `ix_results_content_hash`: which rows use a document, for dropping texts and
  for `summarize purge` (deleting a document checks its references through it).
- `ix_results_slowest`: a batch's generated rows ordered by their time, so the
  dashboard's "slowest documents" reads ten index entries instead of sorting
  every row of the batch. The expression is the one migration 0003 times rows
  with; `readers/views.document_seconds` spells it for readers, and the query must
  match it word for word to use the index (tests/test_retention.py checks the plan).
- `results.claimed_by` and `results.lease_until`: the worker running a row, and until when
  it holds it (it renews the lease while it works). A running row is claimed again only
  once its lease has run out, so a second delivery never runs a document twice.
- PostgreSQL: `grant_dashboards()`, the one place that says what the read-only `dashboards`
  role may read: `results`, `batches` and the three views, never `documents` (the texts).
  It runs here when the role exists, from deploy/postgres/init/10-dashboards-role.sh when
  the role is made after the tables, and again from any migration that recreates a view.

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
    old, new = (
        ("body TEXT NOT NULL", "body TEXT") if nullable else ("body TEXT", "body TEXT NOT NULL")
    )
    sqlite_edit_table(bind, "documents", rf"\b{old}\b(?! NOT NULL)", new)


def sqlite_edit_table(bind: sa.Connection, table: str, pattern: str, replacement: str) -> None:
    """Edit a table's stored CREATE TABLE text in place (the first match of `pattern`), for a
    change that leaves what is on disk valid: dropping or widening a constraint."""
    created = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).scalar_one()
    changed = re.sub(pattern, replacement, created, count=1)
    if changed == created:
        raise RuntimeError(f"{table}: {pattern!r} not found in: {created}")
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    bind.exec_driver_sql(
        "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?", (changed, table)
    )
    bind.exec_driver_sql(f"PRAGMA schema_version = {version + 1}")
    bind.exec_driver_sql("PRAGMA writable_schema = OFF")


READABLE = ("results", "batches", "batch_stats", "daily_stats", "failures")


def grant_dashboards(readable: tuple[str, ...]) -> str:
    """The function that grants the `dashboards` role what it may read, and a call of it."""
    return f"""
CREATE OR REPLACE FUNCTION grant_dashboards() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'dashboards') THEN
        ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES FROM dashboards;
        REVOKE ALL ON ALL TABLES IN SCHEMA public FROM dashboards;
        GRANT SELECT ON {", ".join(readable)} TO dashboards;
    END IF;
END
$$;
SELECT grant_dashboards();
"""


GRANT_DASHBOARDS = grant_dashboards(READABLE)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    _body_nullable(True)
    op.add_column("results", sa.Column("claimed_by", sa.String(length=100), nullable=True))
    op.add_column("results", sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))
    op.create_index(op.f("ix_results_content_hash"), "results", ["content_hash"])
    op.execute(
        f"CREATE INDEX ix_results_slowest ON results (batch, ({seconds(dialect)})) "
        f"WHERE {GENERATED}"
    )
    if dialect == "postgresql":
        op.execute(GRANT_DASHBOARDS)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS grant_dashboards()")
    op.drop_index("ix_results_slowest", table_name="results")
    for column in ("lease_until", "claimed_by"):  # SQLite 3.35+ drops a column in place
        op.execute(f"ALTER TABLE results DROP COLUMN {column}")
    op.drop_index(op.f("ix_results_content_hash"), table_name="results")
    op.execute("UPDATE documents SET body = '' WHERE body IS NULL")
    _body_nullable(False)
