"""Working on a batch after submit: stream its results, retry its failures, cancel what waits.

Results stream from a server-side cursor in pages, so exporting a million rows
costs no more memory than exporting a hundred.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TextIO

import sqlalchemy as sa

from jobs import queue, retention
from jobs.models import batches, results, utcnow
from jobs.settings import Settings

PAGE_ROWS = 1000
CANCELLED = "cancelled by summarize cancel"
EXPORTED = [c.name for c in results.columns]


def exists(db: sa.Engine, batch: str) -> bool:
    with db.connect() as conn:
        return (
            conn.execute(sa.select(batches.c.name).where(batches.c.name == batch)).first()
            is not None
        )


def rows(db: sa.Engine, batch: str | None = None, status: str | None = None) -> Iterator[dict]:
    """Every matching row of `results`, in id order, fetched a page at a time."""
    query = sa.select(results).order_by(results.c.id)
    if batch is not None:
        query = query.where(results.c.batch == batch)
    if status is not None:
        query = query.where(results.c.status == status)
    with db.connect() as conn:
        streamed = conn.execution_options(stream_results=True, yield_per=PAGE_ROWS)
        for row in streamed.execute(query):
            yield dict(row._mapping)


def write(rows_: Iterator[dict], out: TextIO, fmt: str) -> int:
    """Write rows as JSON lines or CSV (with a header); returns how many."""
    count = 0
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=EXPORTED, lineterminator="\n")
        writer.writeheader()
        for row in rows_:
            writer.writerow({k: _cell(_plain(v)) for k, v in row.items()})
            count += 1
    else:
        for row in rows_:
            out.write(json.dumps({k: _plain(v) for k, v in row.items()}, ensure_ascii=False))
            out.write("\n")
            count += 1
    return count


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(value):
    """A CSV cell a spreadsheet will not run: text starting like a formula gets a leading `'`
    (OWASP's advice on CSV injection)."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _plain(value):
    """Datetimes as ISO 8601; the csv module writes None as an empty field by itself."""
    return value.isoformat() if isinstance(value, datetime) else value


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

    keys = queue.commit_then_push(settings, db, write, failed_again)
    return Retried(len(keys), counts["rows"], counts["unreadable"])


RETRY_UNSENT = "`summarize retry` could not reach Redis to queue it: run the retry again"


def cancel(db: sa.Engine, batch: str, *, keep_texts: bool = False) -> int:
    """Mark the batch's queued rows cancelled; running ones finish. Returns how many."""
    now = utcnow()
    with db.begin() as conn:
        cancelled = conn.execute(
            results.update()
            .where(results.c.batch == batch, results.c.status == "queued")
            .values(status="cancelled", finished_at=now, error=CANCELLED)
        ).rowcount
        if cancelled and not keep_texts:
            retention.drop_texts(
                conn,
                sa.select(results.c.content_hash).where(
                    results.c.batch == batch,
                    results.c.status == "cancelled",
                    results.c.finished_at == now,
                ),
            )
        return cancelled
