"""Notifications: where a batch says that it ended, and what came of saying it.

- `batches.notify_url`: where a notice of the batch's end is POSTed (`submit --notify`,
  SUMMARIZE_NOTIFY_URL, the API's metadata `notify_url`); set once every document is queued.
- `batches.notified_at`: when a worker or `summarize serve` claimed the notice (one sends it).
- `batches.notice`: what came of it: `delivered: HTTP 200 after 1 attempt`, or why not.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ADD COLUMN on both dialects: SQLite keeps the table (and what refers to it) in place
    op.add_column("batches", sa.Column("notify_url", sa.String(length=2000), nullable=True))
    op.add_column("batches", sa.Column("notified_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("batches", sa.Column("notice", sa.String(length=500), nullable=True))


def downgrade() -> None:
    for column in ("notice", "notified_at", "notify_url"):  # SQLite 3.35+ drops in place
        op.execute(f"ALTER TABLE batches DROP COLUMN {column}")
