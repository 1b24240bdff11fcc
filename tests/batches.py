"""Batches made the real way for the dashboard tests: submitted to the real Redis, summarized
by the real drain loop and recorder with a stand-in engine.

`make_week` leaves two batches: monday (five documents) and tuesday (sixteen: thirteen
new, one deduplicated from monday, one the engine refuses until it fails, one that is
not UTF-8 and fails when submitted).
"""

from __future__ import annotations

import time

import redis
import sqlalchemy as sa

from core.tables import STATUSES, results
from jobs.submit import submit as submit_files
from readers.views import as_utc
from tests.fakes import FakeEngine
from tests.helpers import WAIT_S, summarize_one, write
from worker.drain import Drain
from worker.recorder import Recorder
from worker.work import Outcome

STEP_S = 0.01  # the stand-in engine takes this long per step: documents finish apart


def submitted(settings, db, tmp_path, texts: dict[str, str], batch="b") -> dict[str, str]:
    """Submit documents for real; returns {file name: result key}."""
    folder = tmp_path / "corpus"
    for name, text in texts.items():
        write(folder, name, text)
    client = redis.Redis.from_url(settings.broker_url)
    submit_files(settings, db, client, [str(folder)], batch)
    with db.connect() as conn:
        rows = conn.execute(sa.select(results.c.source_path, results.c.result_key)).all()
    return {path.rsplit("/", 1)[-1]: key for path, key in rows}


class SlowRefusingEngine(FakeEngine):
    """Finishes one document per step, a little slower each step; refuses 'poison' outright."""

    def __init__(self):
        super().__init__(per_step=1, refuse_on="poison")

    def step(self):
        time.sleep(STEP_S * (1 + self.steps % 4))
        return super().step()


def again(settled) -> bool:
    """Whether a document was written back as queued, to be tried again."""
    return isinstance(settled, Outcome) and settled.status == "queued"


def summarize_queued(settings, db, batch: str) -> None:
    """Run the real drain over the batch's queued documents until each has an outcome.

    Finished documents are written at once (not every second), so they finish apart.
    """
    settings = settings.with_changes(flush_interval_s=0.01)
    with db.connect() as conn:
        keys = conn.execute(
            sa.select(results.c.result_key)
            .where(results.c.batch == batch, results.c.status == "queued")
            .distinct()
        ).scalars()
        keys = list(keys)
    fatal = []
    recorder = Recorder(db, retry_s=1, keep_texts=settings.keep_texts)
    drain = Drain(SlowRefusingEngine(), recorder, settings, on_fatal=fatal.append)
    drain.start()
    try:
        pending = keys
        for _ in range(settings.max_attempts):
            futures = {key: summarize_one(drain, key) for key in pending}
            pending = [k for k, f in futures.items() if again(f.result(WAIT_S))]
    finally:
        drain.stop(timeout=5)
    assert fatal == []
    assert pending == []


def durations(db, batch: str) -> list[float]:
    """Seconds each document the batch generated itself took (not deduplicated), slowest first."""
    with db.connect() as conn:
        rows = conn.execute(
            sa.select(results.c.started_at, results.c.finished_at).where(
                results.c.batch == batch,
                results.c.status == "succeeded",
                sa.not_(results.c.deduplicated),
            )
        ).all()
    return sorted(((f - s).total_seconds() for s, f in rows), reverse=True)


MONDAY = {f"m{i}.txt": f"monday report number {i} " * (i + 1) for i in range(5)}
TUESDAY = {
    **{f"t{i:02}.txt": f"tuesday note {i} " * (i % 5 + 1) for i in range(13)},
    "again.txt": MONDAY["m0.txt"],  # summarized on monday: deduplicated
    "poison.txt": "poison pill",  # the engine refuses it on every attempt
    "broken.txt": b"caf\xe9 au lait",  # not UTF-8: failed when submitted
}


def submit(settings, db, tmp_path, batch: str, files: dict[str, str | bytes]) -> None:
    """Submit the files for real from their own folder, tmp_path/BATCH/corpus."""
    submitted(settings, db, tmp_path / batch, files, batch=batch)


def make_week(settings, db, tmp_path) -> None:
    """Monday's five documents, then tuesday's mix, each summarized for real."""
    submit(settings, db, tmp_path, "monday", MONDAY)
    summarize_queued(settings, db, "monday")
    submit(settings, db, tmp_path, "tuesday", TUESDAY)
    summarize_queued(settings, db, "tuesday")


STATUS_COUNTS = STATUSES  # every status a row may have
COUNTED = (
    "documents",
    *STATUS_COUNTS,
    "deduplicated",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
)


def recount(db, batch: str) -> dict:
    """A batch's figures counted again from its rows, in Python: what the rollups must hold."""
    with db.connect() as conn:
        rows = conn.execute(sa.select(results).where(results.c.batch == batch)).all()
    spent = [r for r in rows if not r.deduplicated]
    figures = {"documents": len(rows), "deduplicated": sum(bool(r.deduplicated) for r in rows)}
    for status in STATUS_COUNTS:
        figures[status] = sum(r.status == status for r in rows)
    for tokens in ("prompt_tokens", "completion_tokens", "cached_tokens"):
        figures[tokens] = sum(getattr(r, tokens) or 0 for r in spent)
    started = [as_utc(r.started_at) for r in spent if r.started_at]
    finished = [as_utc(r.finished_at) for r in spent if r.finished_at]
    figures["first_started_at"] = min(started, default=None)
    figures["last_finished_at"] = max(finished, default=None)
    figures["generated"] = sum(r.status == "succeeded" for r in spent)
    return figures
