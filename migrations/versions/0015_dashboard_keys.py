"""Keys that open the dashboard: `api_keys.dashboard` (`summarize keys create NAME --dashboard`).

Once such a key is live, `summarize dashboard` asks every visitor for one (the browser's
password prompt, or `Authorization: Bearer KEY`); it shows every batch, so it is a key for
whoever runs the service. False for the keys made before: they open the API alone.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "api_keys",
        sa.Column("dashboard", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.execute("ALTER TABLE api_keys DROP COLUMN dashboard")  # SQLite 3.35+ drops in place
