"""Documents from records: their ids and metadata, a batch's metadata, a prompt per row.

- `results.doc_id`: the document's own id (a record's id field, an OpenAI Batch
  request's `custom_id`, a file's path), and `results.metadata`: a record's other
  fields as a JSON object. Both NULL on rows made before this migration.
- `batches.metadata`: what `submit --meta KEY=VALUE` attached, as a JSON object;
  `batches.expires_at`: when its documents still queued end (`submit --expire-after`).
- `prompts`: what each prompt hash stands for (instruction, summary length, sentence
  limit, and the JSON schema a `submit --schema` batch's summaries follow). The worker summarizes a row with its row's prompt, not its batch's, so the
  records of one OpenAI Batch file may each bring their own instruction and length.
  Filled here from the batches.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("results", sa.Column("doc_id", sa.Text(), nullable=True))
    op.add_column("results", sa.Column("metadata", sa.Text(), nullable=True))
    op.add_column("batches", sa.Column("metadata", sa.Text(), nullable=True))
    op.add_column("batches", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "prompts",
        sa.Column("prompt_hash", sa.String(16), nullable=False),
        sa.Column("instruction", sa.Text(), nullable=False),
        sa.Column("max_tokens", sa.Integer(), nullable=False),
        sa.Column("max_sentences", sa.Integer(), nullable=True),
        sa.Column("schema", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("prompt_hash", name="pk_prompts"),
    )
    op.execute(
        "INSERT INTO prompts (prompt_hash, instruction, max_tokens, max_sentences, created_at) "
        "SELECT prompt_hash, MIN(instruction), MIN(max_tokens), MIN(max_sentences), "
        "MIN(created_at) FROM batches GROUP BY prompt_hash"
    )


def downgrade() -> None:
    op.drop_table("prompts")
    dropped = (("batches", "expires_at"), ("batches", "metadata"), ("results", "metadata"))
    for table, column in (*dropped, ("results", "doc_id")):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")  # SQLite 3.35+ does it in place
