"""A batch's priority: `high`, `normal` or `low` (`submit --priority`, SUMMARIZE_PRIORITY).

Its documents' messages wait at that priority (core/messages.py), and `retry` and the
requeue sweep queue them again at it. Null, for a batch made before: `normal`.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("batches", sa.Column("priority", sa.String(length=8), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE batches DROP COLUMN priority")  # SQLite 3.35+ drops in place
