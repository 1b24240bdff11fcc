"""Working on a batch after submit: retry its failures, cancel what waits."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from core import queue, retention
from core.settings import Settings
from core.tables import batches, results, utcnow

CANCELLED = "cancelled by summarize cancel"


@dataclass(frozen=True)
class Retried:
    documents: int  # distinct documents queued again
    rows: int  # failed rows now queued
    unreadable: int  # failed at submit (no text): fix the files and submit again


def retry_failed(db: sa.Engine, settings: Settings, batch: str) -> Retried:
    """Queue the batch's failed documents again, with fresh attempts."""
    failed = sa.and_(results.c.batch == batch, results.c.status == "failed")
    retryable = sa.and_(failed, results.c.content_hash.is_not(None))
    counts = {}
    with db.connect() as conn:  # its documents go to its model's queue, whoever retries
        model = conn.execute(sa.select(batches.c.model).where(batches.c.name == batch)).scalar()

    def write(conn: sa.Connection) -> list[str]:
        counts["unreadable"] = conn.execute(
            sa.select(sa.func.count()).where(failed, results.c.content_hash.is_(None))
        ).scalar()
        keys = conn.execute(sa.select(results.c.result_key).where(retryable).distinct())
        keys = keys.scalars().all()
        counts["rows"] = conn.execute(
            results.update()
            .where(retryable)
            .values(
                status="queued",
                attempts=0,
                error=None,
                started_at=None,
                finished_at=None,
                deduplicated=False,
            )
        ).rowcount
        return keys

    def failed_again(conn: sa.Connection, keys: list[str]) -> None:
        """Redis refused the messages: the rows are failed again, saying so."""
        conn.execute(
            results.update()
            .where(
                results.c.batch == batch,
                results.c.result_key.in_(keys),
                results.c.status == "queued",
            )
            .values(status="failed", error=RETRY_UNSENT, finished_at=utcnow())
        )

    keys = queue.commit_then_push(settings, db, write, failed_again, model=model)
    return Retried(len(keys), counts["rows"], counts["unreadable"])


RETRY_UNSENT = "`summarize retry` could not reach Redis to queue it: run the retry again"


def cancel(db: sa.Engine, batch: str, *, keep_texts: bool = False) -> int:
    """Mark the batch's queued rows cancelled; running ones finish. Returns how many."""
    with db.begin() as conn:
        return retention.end_queued(
            conn,
            results.c.batch == batch,
            status="cancelled",
            error=CANCELLED,
            keep_texts=keep_texts,
        )
