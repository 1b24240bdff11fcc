"""The schema every part shares. `results` is a contract: dashboards read it directly.

Change a table only through a migration under `migrations/versions/`, and keep the
column lists of docs/results.md and docs/dashboards.md in step (tests/test_migrations.py
holds them to it).
"""

from __future__ import annotations

from datetime import date, datetime, timezone

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    ColumnElement,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    literal_column,
    or_,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Status:
    """A row's status (`results.status`), named here and nowhere else."""

    QUEUED = "queued"  # waiting for a worker (again, after a failed attempt with attempts left)
    RUNNING = "running"  # claimed by a worker, under its lease
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"  # summarize cancel
    EXPIRED = "expired"  # its batch's --expire-after passed first (migration 0009)


PENDING = (Status.QUEUED, Status.RUNNING)
FINAL = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED, Status.EXPIRED)
STATUSES = PENDING + FINAL


# What one generation fills in a row: the worker writes them, and submit copies them to each
# row an earlier summary answers (deduplicated).
GENERATED_COLUMNS = (
    "summary",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "parts",
    "finish_reason",
    "repetition",
    "copied",
    "novel_numbers",
    "compression",
    "looped",
    "flaw",
)


_PENDING_ROW = text("status IN ('queued', 'running')")  # partial indexes: pending rows, failed rows
_FAILED_ROW = text("status = 'failed'")
# The `flagged` view's rows (0006, 0011)
_FLAGGED_ROW = text("(looped OR novel_numbers > 0 OR flaw IS NOT NULL)")


# Made by migrations and not described here, so Alembic's autogenerate must not see them:
# an expression index is spelled differently per dialect (migration 0004).
UNMODELLED = {"ix_results_slowest"}


def modelled(obj, name, type_, reflected, compare_to) -> bool:
    """Alembic's include_object hook: leave out what only the migrations describe."""
    return name not in UNMODELLED


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Document(Base):
    """A document's text, stored once per distinct content; dropped once no row needs it."""

    __tablename__ = "documents"

    content_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    body: Mapped[str | None] = mapped_column(Text, nullable=True)  # NULL: dropped (0004)
    size_bytes: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Batch(Base):
    """A named submission, with the model and prompt its documents are summarized with."""

    __tablename__ = "batches"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    model: Mapped[str] = mapped_column(String(500))
    instruction: Mapped[str] = mapped_column(Text)
    max_tokens: Mapped[int] = mapped_column(Integer)
    # a summary ends after this many sentences; NULL: no limit (migration 0007)
    max_sentences: Mapped[int | None] = mapped_column(Integer, nullable=True)
    prompt_hash: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # what `submit --meta KEY=VALUE` attached, as a JSON object (migration 0008)
    meta: Mapped[str | None] = mapped_column("metadata", Text, nullable=True)
    # documents still queued then end expired (submit --expire-after; 0008, 0009)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # where a notice of its end is POSTed, once every document is queued (core/notices.py;
    # migration 0013), when a worker or server claimed it, and what came of it
    notify_url: Mapped[str | None] = mapped_column(String(2000), nullable=True)
    notified_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    notice: Mapped[str | None] = mapped_column(String(500), nullable=True)
    # high, normal or low: its messages wait at it (core/messages.py); NULL: normal (0014)
    priority: Mapped[str | None] = mapped_column(String(8), nullable=True)


class Prompt(Base):
    """What a prompt hash stands for: the worker summarizes each row with its row's prompt.

    A batch's own prompt is one; records of an OpenAI Batch file may bring their own
    instruction and length (migration 0008)."""

    __tablename__ = "prompts"

    prompt_hash: Mapped[str] = mapped_column(String(16), primary_key=True)
    instruction: Mapped[str] = mapped_column(Text)
    max_tokens: Mapped[int] = mapped_column(Integer)
    max_sentences: Mapped[int | None] = mapped_column(Integer, nullable=True)  # NULL: no limit
    # a JSON schema the summary is generated under (submit --schema); NULL: plain text
    schema: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Result(Base):
    """One document of one batch: its status, its summary and what it cost."""

    __tablename__ = "results"
    __table_args__ = (
        UniqueConstraint("batch", "source_path"),
        CheckConstraint(f"status IN {STATUSES!r}", name="status"),
        Index(None, "batch", "status"),
        Index(None, "result_key"),
        Index(None, "content_hash"),
        Index(
            "ix_results_pending",
            "created_at",
            sqlite_where=_PENDING_ROW,
            postgresql_where=_PENDING_ROW,
        ),
        Index(
            "ix_results_failed",
            "finished_at",
            sqlite_where=_FAILED_ROW,
            postgresql_where=_FAILED_ROW,
        ),
        Index(
            "ix_results_flagged",
            "finished_at",
            sqlite_where=_FLAGGED_ROW,
            postgresql_where=_FLAGGED_ROW,
        ),
        Index(
            "ix_results_flagged_batch",
            "batch",
            "finished_at",
            sqlite_where=_FLAGGED_ROW,
            postgresql_where=_FLAGGED_ROW,
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    batch: Mapped[str] = mapped_column(String(200), ForeignKey("batches.name", ondelete="CASCADE"))
    source_path: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str | None] = mapped_column(
        String(64), ForeignKey("documents.content_hash"), nullable=True
    )
    result_key: Mapped[str | None] = mapped_column(String(64), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default=Status.QUEUED)
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
    claimed_by: Mapped[str | None] = mapped_column(String(100), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Quality signals of a generated summary (core/quality.py, migration 0005)
    repetition: Mapped[float | None] = mapped_column(Float, nullable=True)
    copied: Mapped[float | None] = mapped_column(Float, nullable=True)
    novel_numbers: Mapped[int | None] = mapped_column(Integer, nullable=True)
    compression: Mapped[float | None] = mapped_column(Float, nullable=True)
    looped: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    flaw: Mapped[str | None] = mapped_column(String(16), nullable=True)  # migration 0011
    # The document's own id (a record's id field, an OpenAI request's custom_id; a file's
    # path) and a record's other fields as a JSON object (migration 0008)
    doc_id: Mapped[str | None] = mapped_column(Text, nullable=True)
    meta: Mapped[str | None] = mapped_column("metadata", Text, nullable=True)


def _count(kind=Integer) -> Mapped[int]:
    return mapped_column(kind, server_default="0")


class _Figures:
    """What a rollup counts of its rows (see migration 0003: triggers keep them in step)."""

    succeeded: Mapped[int] = _count()
    failed: Mapped[int] = _count()
    cancelled: Mapped[int] = _count()
    expired: Mapped[int] = _count()  # migration 0009
    deduplicated: Mapped[int] = _count()
    generated: Mapped[int] = _count()  # succeeded and not deduplicated
    prompt_tokens: Mapped[int] = _count(BigInteger)  # rows not deduplicated
    completion_tokens: Mapped[int] = _count(BigInteger)
    cached_tokens: Mapped[int] = _count(BigInteger)
    first_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class BatchRollup(_Figures, Base):
    """One batch's figures, read by `batch_stats`, `summarize status` and the dashboards."""

    __tablename__ = "batch_rollups"

    batch: Mapped[str] = mapped_column(
        String(200), ForeignKey("batches.name", ondelete="CASCADE"), primary_key=True
    )
    documents: Mapped[int] = _count()
    queued: Mapped[int] = _count()
    running: Mapped[int] = _count()


class DailyRollup(_Figures, Base):
    """The figures of one batch's rows that finished on one UTC day, read by `daily_stats`."""

    __tablename__ = "daily_rollups"
    __table_args__ = (Index(None, "batch"),)

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    batch: Mapped[str] = mapped_column(
        String(200), ForeignKey("batches.name", ondelete="CASCADE"), primary_key=True
    )
    documents: Mapped[int] = _count()


class DurationCount(Base):
    """Generated rows per (day, batch, time bucket): the histogram p50 and p95 come from."""

    __tablename__ = "duration_counts"
    __table_args__ = (Index(None, "batch"),)

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    batch: Mapped[str] = mapped_column(
        String(200), ForeignKey("batches.name", ondelete="CASCADE"), primary_key=True
    )
    bucket: Mapped[int] = mapped_column(Integer, primary_key=True)
    documents: Mapped[int] = _count()


class DurationBucket(Base):
    """The fixed time buckets: four per doubling, from 2^-10 s to 2^17 s."""

    __tablename__ = "duration_buckets"
    __table_args__ = (Index(None, "low_s"),)

    bucket: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    low_s: Mapped[float] = mapped_column(Float)
    high_s: Mapped[float | None] = mapped_column(Float)
    seconds: Mapped[float] = mapped_column(Float)  # what a percentile in this bucket reports


class QualityRollup(Base):
    """One batch's summaries with quality signals (migration 0006), read by `batch_quality`."""

    __tablename__ = "quality_rollups"

    batch: Mapped[str] = mapped_column(
        String(200), ForeignKey("batches.name", ondelete="CASCADE"), primary_key=True
    )
    summaries: Mapped[int] = _count()  # succeeded rows with signals, deduplicated included
    looped: Mapped[int] = _count()
    truncated: Mapped[int] = _count()  # finish_reason = 'length'
    novel_numbers: Mapped[int] = _count()  # summaries with at least one
    flawed: Mapped[int] = _count()  # summaries with a flaw (migration 0011)
    repetition_sum: Mapped[float] = _count(Float)
    copied_sum: Mapped[float] = _count(Float)
    compression_sum: Mapped[float] = _count(Float)


class ApiKey(Base):
    """A key `summarize serve` accepts (migration 0012): only a hash of it is kept."""

    __tablename__ = "api_keys"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)  # SHA-256, hex
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # it opens `summarize dashboard` too (migration 0015)
    dashboard: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class StoredFile(Base):
    """A file of the API (migration 0012): an uploaded batch input, or a batch's output or
    error file; its bytes are under the data folder's `files/`."""

    __tablename__ = "files"
    __table_args__ = (Index(None, "owner", "created_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(100))  # the key's name
    filename: Mapped[str] = mapped_column(Text)
    purpose: Mapped[str] = mapped_column(String(32))  # batch, batch_output
    bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ApiBatch(Base):
    """What a batch made through the API has beyond an ordinary batch (migration 0012): its
    owner, its input file, and the moments of its life the rows cannot tell."""

    __tablename__ = "api_batches"
    __table_args__ = (Index(None, "owner", "created_at"),)

    id: Mapped[str] = mapped_column(String(200), primary_key=True)  # the batch's name
    owner: Mapped[str] = mapped_column(String(100))
    input_file_id: Mapped[str] = mapped_column(String(64))
    endpoint: Mapped[str] = mapped_column(String(64))
    completion_window: Mapped[str] = mapped_column(String(16))
    meta: Mapped[str | None] = mapped_column("metadata", Text, nullable=True)  # a JSON object
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    in_progress_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    failed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    errors: Mapped[str | None] = mapped_column(Text, nullable=True)  # a JSON list, when failed
    cancelling_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    output_file_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error_file_id: Mapped[str | None] = mapped_column(String(64), nullable=True)


documents = Document.__table__
batches = Batch.__table__
prompts = Prompt.__table__
results = Result.__table__
api_keys = ApiKey.__table__
stored_files = StoredFile.__table__
api_batches = ApiBatch.__table__
# Pending as a literal test, not bound parameters: SQLite then uses the partial index of
# pending rows, and an UPDATE so filtered runs its per-row triggers about five times faster
# (measured on 1,000-row writes: 130 against 680 microseconds a row).
is_pending = results.c.status.in_([literal_column(f"'{status}'") for status in PENDING])


def lease_lapsed(now: datetime) -> ColumnElement[bool]:
    """A running row no live worker holds: its lease ran out, or it never had one."""
    return or_(results.c.lease_until.is_(None), results.c.lease_until < now)


batch_rollups = BatchRollup.__table__
daily_rollups = DailyRollup.__table__
# The tables the triggers change with the rows (migrations 0003 and 0006).
ROLLUPS = (batch_rollups, daily_rollups, QualityRollup.__table__, DurationCount.__table__)
