"""The schema every part shares. `results` is a contract: dashboards read it directly.

Change a table only through a migration under `migrations/versions/`, and keep
the README's column list in step.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
PENDING = ("queued", "running")
FINAL = ("succeeded", "failed", "cancelled")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Document(Base):
    """A document's text, stored once per distinct content."""

    __tablename__ = "documents"

    content_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    body: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Batch(Base):
    """A named submission, with the model and prompt its documents are summarized with."""

    __tablename__ = "batches"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    model: Mapped[str] = mapped_column(String(500))
    instruction: Mapped[str] = mapped_column(Text)
    max_tokens: Mapped[int] = mapped_column(Integer)
    prompt_hash: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Result(Base):
    """One document of one batch: its status, its summary and what it cost."""

    __tablename__ = "results"
    __table_args__ = (
        UniqueConstraint("batch", "source_path"),
        CheckConstraint(f"status IN {STATUSES!r}", name="status"),
        Index(None, "batch", "status"),
        Index(None, "result_key", "status"),
        Index(None, "status", "started_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    batch: Mapped[str] = mapped_column(String(200), ForeignKey("batches.name", ondelete="CASCADE"))
    source_path: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str | None] = mapped_column(
        String(64), ForeignKey("documents.content_hash"), nullable=True
    )
    result_key: Mapped[str | None] = mapped_column(String(64), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    summary: Mapped[str | None] = mapped_column(Text, nullable=True)
    prompt_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    completion_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cached_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    parts: Mapped[int | None] = mapped_column(Integer, nullable=True)
    finish_reason: Mapped[str | None] = mapped_column(String(16), nullable=True)
    model: Mapped[str] = mapped_column(String(500))
    prompt_hash: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    deduplicated: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


documents = Document.__table__
batches = Batch.__table__
results = Result.__table__
