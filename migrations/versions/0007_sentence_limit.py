"""A batch's limit of sentences: its summaries end after that many (worker/sentences.py).

`batches.max_sentences` is set by `submit` from SUMMARIZE_MAX_SENTENCES (3 by default)
and read by the worker with the batch's instruction; NULL (batches made before this
migration, or a limit of 0) is no limit. It is part of the batch's prompt hash.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("batches", sa.Column("max_sentences", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE batches DROP COLUMN max_sentences")  # SQLite 3.35+ does it in place
