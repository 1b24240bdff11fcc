"""What the database keeps: a document's text while a row needs it, and rows until purged.

A text is needed while a row of it is queued, running, or failed (`summarize retry`
sends failed rows to the worker again). Once none is, the text is dropped (its
hash and size stay) unless SUMMARIZE_KEEP_TEXTS is set; a later submit of the
same text stores it again. `purge` deletes old finished rows, the batches and
rollup rows they leave empty, and the documents no row uses, a step at a time.

On PostgreSQL the documents are locked before they are checked: a submit that
stores one of them again holds that lock until it commits, so the check sees
its new rows (sorting by hash on both sides keeps the locks in one order).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa

from core.database import one_of
from core.tables import (
    FINAL,
    DailyRollup,
    DurationCount,
    Status,
    batch_rollups,
    batches,
    documents,
    results,
    utcnow,
)

NEEDS_TEXT = (Status.QUEUED, Status.RUNNING, Status.FAILED)
PURGE_STEP = 5000  # rows deleted in one transaction

_needs_text = results.c.status.in_([sa.literal_column(f"'{s}'") for s in NEEDS_TEXT])
_final = results.c.status.in_([sa.literal_column(f"'{s}'") for s in FINAL])

Hashes = Iterable[str] | sa.Select


def end_queued(
    conn: sa.Connection, rows: sa.ColumnElement, *, status: str, error: str, keep_texts: bool
) -> int:
    """End the queued ones of these rows with `status` and `error` (cancelled by cancel,
    expired by the sweep), and drop the texts no row needs any more; returns how many ended.
    Running rows finish."""
    now = utcnow()
    ended = conn.execute(
        results.update()
        .where(rows, results.c.status == Status.QUEUED)
        .values(status=status, finished_at=now, error=error)
    ).rowcount
    if ended and not keep_texts:
        drop_texts(
            conn,
            sa.select(results.c.content_hash).where(
                rows, results.c.status == status, results.c.finished_at == now
            ),
        )
    return ended


def drop_texts(conn: sa.Connection, hashes: Hashes) -> int:
    """Drop the texts of these documents that no row needs any more; returns how many."""
    found = _chosen(conn, hashes)
    if found is None:
        return 0
    chosen, values = found
    _lock(conn, values, chosen, documents.c.body.is_not(None))
    needed = sa.exists().where(results.c.content_hash == documents.c.content_hash, _needs_text)
    return conn.execute(
        documents.update().where(chosen, documents.c.body.is_not(None), ~needed).values(body=None),
        values,
    ).rowcount


def _delete_unused(conn: sa.Connection, hashes: list[str]) -> int:
    """Delete the documents of these hashes that no row refers to; returns how many."""
    found = _chosen(conn, hashes)
    if found is None:
        return 0
    chosen, values = found
    _lock(conn, values, chosen)
    used = sa.exists().where(results.c.content_hash == documents.c.content_hash)
    return conn.execute(documents.delete().where(chosen, ~used), values).rowcount


def _chosen(conn: sa.Connection, hashes: Hashes) -> tuple[sa.ColumnElement[bool], dict] | None:
    """The documents of these hashes, as a test and its parameters (a list is bound whole, so
    the statement's text is the same for any number of them); None when there are none."""
    if isinstance(hashes, sa.Select):
        return documents.c.content_hash.in_(hashes), {}
    chosen = sorted({h for h in hashes if h})
    if not chosen:
        return None
    return one_of(documents.c.content_hash, "hashes", conn.dialect), {"hashes": chosen}


def _lock(conn: sa.Connection, values: dict, *where: sa.ColumnElement[bool]) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(
            sa.select(documents.c.content_hash)
            .where(*where)
            .order_by(documents.c.content_hash)
            .with_for_update(),
            values,
        )


@dataclass
class Purged:
    """What `purge` removed."""

    rows: int = 0
    documents: int = 0
    batches: list[str] = field(default_factory=list)


def purge(
    db: sa.Engine,
    *,
    before: datetime | None = None,
    batch: str | None = None,
    step: int = PURGE_STEP,
    on_step: Callable[[Purged], None] = lambda purged: None,
) -> Purged:
    """Delete finished rows (of `batch`, or finished before `before`), then what they leave empty.

    Queued and running rows are never touched, so a worker draining beside it loses nothing;
    a batch is deleted once it has no rows left (with `before`: if it was also created
    before then). Each step of `step` rows is its own transaction.
    """
    if before is None and batch is None:
        raise ValueError("purge needs a date, a batch, or both")
    chosen = [_final]
    if batch is not None:
        chosen.append(results.c.batch == batch)
    if before is not None:
        chosen.append(results.c.finished_at < before)
    purged = Purged()
    last_id = 0
    while True:
        with db.begin() as conn:
            found = conn.execute(
                sa.select(results.c.id, results.c.content_hash)
                .where(results.c.id > last_id, *chosen)
                .order_by(results.c.id)
                .limit(step)
            ).all()
            if not found:
                break
            last_id = found[-1].id
            purged.rows += conn.execute(
                results.delete().where(results.c.id.in_([r.id for r in found]), _final)
            ).rowcount
            purged.documents += _delete_unused(conn, [r.content_hash for r in found])
        on_step(purged)
    with db.begin() as conn:
        purged.batches = _delete_empty_batches(conn, before=before, batch=batch)
        _delete_empty_rollups(conn, before)
    return purged


def _delete_empty_batches(conn: sa.Connection, *, before, batch) -> list[str]:
    empty = sa.select(batch_rollups.c.batch).where(batch_rollups.c.documents == 0)
    query = sa.select(batches.c.name).where(batches.c.name.in_(empty))
    if batch is not None:
        query = query.where(batches.c.name == batch)
    if before is not None:
        query = query.where(batches.c.created_at < before)
    names = conn.execute(query.order_by(batches.c.name)).scalars().all()
    for name in names:  # rollup rows go with their batch (ON DELETE CASCADE)
        conn.execute(batches.delete().where(batches.c.name == name))
    return list(names)


def _delete_empty_rollups(conn: sa.Connection, before: datetime | None) -> None:
    """Day rows and histogram rows whose rows are all gone."""
    for table in (DailyRollup.__table__, DurationCount.__table__):
        query = table.delete().where(table.c.documents == 0)
        if before is not None:
            query = query.where(table.c.day <= before.date())
        conn.execute(query)
