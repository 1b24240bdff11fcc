"""The initial schema: documents, batches and the results table dashboards read.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "batches",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=500), nullable=False),
        sa.Column("instruction", sa.Text(), nullable=False),
        sa.Column("max_tokens", sa.Integer(), nullable=False),
        sa.Column("prompt_hash", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_batches")),
    )
    op.create_table(
        "documents",
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("content_hash", name=op.f("pk_documents")),
    )
    op.create_table(
        "results",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("batch", sa.String(length=200), nullable=False),
        sa.Column("source_path", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=True),
        sa.Column("result_key", sa.String(length=64), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("cached_tokens", sa.Integer(), nullable=True),
        sa.Column("parts", sa.Integer(), nullable=True),
        sa.Column("finish_reason", sa.String(length=16), nullable=True),
        sa.Column("model", sa.String(length=500), nullable=False),
        sa.Column("prompt_hash", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("deduplicated", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')",
            name=op.f("ck_results_status"),
        ),
        sa.ForeignKeyConstraint(
            ["batch"], ["batches.name"], name=op.f("fk_results_batch_batches"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["content_hash"],
            ["documents.content_hash"],
            name=op.f("fk_results_content_hash_documents"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_results")),
        sa.UniqueConstraint("batch", "source_path", name=op.f("uq_results_batch_source_path")),
    )
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_results_batch_status"), ["batch", "status"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_results_result_key_status"), ["result_key", "status"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_results_status_started_at"), ["status", "started_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_results_status_started_at"))
        batch_op.drop_index(batch_op.f("ix_results_result_key_status"))
        batch_op.drop_index(batch_op.f("ix_results_batch_status"))

    op.drop_table("results")
    op.drop_table("documents")
    op.drop_table("batches")
