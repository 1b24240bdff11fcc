"""What `summarize serve` keeps: its keys, its files, and its batches' API fields.

- `api_keys`: each key by name, as a SHA-256 hash (the key itself is shown once, when made);
  `revoked_at` once revoked.
- `files`: the API's files: uploaded batch input files (`purpose` batch) and the output and
  error files of its batches (`batch_output`), each with its owner (a key's name); the bytes
  are under the data folder's `files/`.
- `api_batches`: a batch made through the API (its `id` is the batch's name): owner, input
  file, endpoint, completion window, metadata, and the moments the rows cannot tell
  (validated, failed with its errors, cancel asked), with its output and error files once made.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def _time(name: str, nullable: bool = True) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        _time("created_at", nullable=False),
        _time("revoked_at"),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_table(
        "files",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("filename", sa.Text(), nullable=False),
        sa.Column("purpose", sa.String(length=32), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        _time("created_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_files")),
    )
    op.create_index(op.f("ix_files_owner_created_at"), "files", ["owner", "created_at"])
    op.create_table(
        "api_batches",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("owner", sa.String(length=100), nullable=False),
        sa.Column("input_file_id", sa.String(length=64), nullable=False),
        sa.Column("endpoint", sa.String(length=64), nullable=False),
        sa.Column("completion_window", sa.String(length=16), nullable=False),
        sa.Column("metadata", sa.Text(), nullable=True),
        _time("created_at", nullable=False),
        _time("in_progress_at"),
        _time("failed_at"),
        sa.Column("errors", sa.Text(), nullable=True),
        _time("cancelling_at"),
        sa.Column("output_file_id", sa.String(length=64), nullable=True),
        sa.Column("error_file_id", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_batches")),
    )
    op.create_index(op.f("ix_api_batches_owner_created_at"), "api_batches", ["owner", "created_at"])


def downgrade() -> None:
    op.drop_table("api_batches")
    op.drop_table("files")
    op.drop_table("api_keys")
