"""Quality signals on every row: what the worker measured of a summary when it wrote it.

- `repetition`: the share of the summary's 4-word runs it repeats;
- `copied`: the longest run of words copied from the document, over the summary's length;
- `novel_numbers`: numbers in the summary that the document does not contain;
- `compression`: the summary's tokens over the document's;
- `looped`: the summary repeats itself (a sentence or an 8-word run three times), even
  after it was generated again once with settings that break loops.

Each is NULL where no summary was generated (queued, running, failed, cancelled rows, and
rows summarized before this migration). worker/quality.py computes them.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

COLUMNS = {
    "repetition": sa.Float,
    "copied": sa.Float,
    "novel_numbers": sa.Integer,
    "compression": sa.Float,
    "looped": sa.Boolean,
}


def upgrade() -> None:
    for name, kind in COLUMNS.items():
        op.add_column("results", sa.Column(name, kind(), nullable=True))


def downgrade() -> None:
    for name in reversed(COLUMNS):  # SQLite 3.35+ drops a column in place
        op.execute(f"ALTER TABLE results DROP COLUMN {name}")
