"""How far a batch has come, and waiting for it to finish (`submit --wait`, nightly)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa

from core.requeue import REQUEUE_EVERY_S
from core.tables import FINAL, STATUSES, Status, batch_rollups, results


@dataclass(frozen=True)
class Progress:
    """How far a batch has come."""

    total: int
    by_status: dict[str, int]

    @property
    def finished(self) -> int:
        return sum(self.by_status.get(status, 0) for status in FINAL)

    @property
    def done(self) -> bool:
        return self.finished >= self.total

    @property
    def all_succeeded(self) -> bool:
        return self.by_status.get(Status.SUCCEEDED, 0) == self.total


def progress(db: sa.Engine, batch: str) -> Progress:
    with db.connect() as conn:
        counts = dict(
            conn.execute(
                sa.select(results.c.status, sa.func.count())
                .where(results.c.batch == batch)
                .group_by(results.c.status)
            ).all()
        )
    return Progress(sum(counts.values()), counts)


def rolled_up(db: sa.Engine, batch: str) -> Progress:
    """The batch's progress from its rollup row: one row read, whatever the batch's size."""
    with db.connect() as conn:
        row = conn.execute(sa.select(batch_rollups).where(batch_rollups.c.batch == batch)).first()
    if row is None:  # nothing recorded yet
        return Progress(0, {})
    return Progress(row.documents, {status: getattr(row, status) for status in STATUSES})


def wait(
    db: sa.Engine,
    batch: str,
    *,
    deadline_s: float | None = None,
    poll_s: float = 1.0,
    on_progress: Callable[[Progress], None] = lambda p: None,
    requeue: Callable[[], object] | None = None,
) -> Progress:
    """Block until every row of the batch is final, or the deadline passes.

    `requeue` runs every REQUEUE_EVERY_S, to put back documents whose message Redis lost.
    """
    start = last_requeue = time.monotonic()
    while True:
        now = progress(db, batch)
        on_progress(now)
        if now.done:
            return now
        if deadline_s is not None and time.monotonic() - start >= deadline_s:
            return now
        if requeue is not None and time.monotonic() - last_requeue >= REQUEUE_EVERY_S:
            requeue()
            last_requeue = time.monotonic()
        time.sleep(poll_s)
