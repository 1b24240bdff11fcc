"""The rollups say what the rows say, after every way a row can change.

Readers (`summarize status`, `batches`, the dashboard, Grafana) read rollups that
triggers keep in step with `results` (migration 0003). After each step below, on
SQLite and on PostgreSQL, every count and token total equals a full recount of
the rows; first start and last finish equal it too while nothing was tried
twice, and otherwise only ever move outward (a retried document keeps the batch's
first start).
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import redis
import sqlalchemy as sa
from alembic import command

from core import database
from core.requeue import EXPIRED, expire_overdue, requeue_stranded
from core.settings import Settings
from core.tables import ROLLUPS, results, utcnow
from core.tables import batches as batches_table
from jobs import batches
from readers.views import as_utc, batch_quality, batch_stats, daily_stats
from tests.batches import COUNTED, TUESDAY, make_week, recount, submit, summarize_queued
from tests.stack import Worker
from worker.recorder import Recorder


def stats(db, batch: str):
    with db.connect() as conn:
        return conn.execute(sa.select(batch_stats).where(batch_stats.c.batch == batch)).one()


def quality_recount(db, batch: str) -> dict:
    """batch_quality's figures counted again from the rows with signals, in Python."""
    with db.connect() as conn:
        rows = conn.execute(
            sa.select(results).where(
                results.c.batch == batch,
                results.c.status == "succeeded",
                results.c.looped.is_not(None),
            )
        ).all()
    figures = {
        "summaries": len(rows),
        "looped": sum(bool(r.looped) for r in rows),
        "truncated": sum(r.finish_reason == "length" for r in rows),
        "novel_numbers": sum(r.novel_numbers > 0 for r in rows),
        "flawed": sum(r.flaw is not None for r in rows),
    }
    for name in ("repetition", "copied", "compression"):
        figures[name] = (
            pytest.approx(sum(getattr(r, name) for r in rows) / len(rows)) if rows else None
        )
    return figures


def assert_rollup_agrees(db, batch: str, *, exact_times: bool) -> None:
    with db.connect() as conn:
        quality = conn.execute(sa.select(batch_quality).where(batch_quality.c.batch == batch)).one()
    assert quality._asdict() == {"batch": batch, **quality_recount(db, batch)}
    row, counted = stats(db, batch), recount(db, batch)
    assert {name: getattr(row, name) for name in COUNTED} == {n: counted[n] for n in COUNTED}
    first, last = as_utc(row.first_started_at), as_utc(row.last_finished_at)
    if exact_times:
        assert (first, last) == (counted["first_started_at"], counted["last_finished_at"])
    else:  # a start or finish that was undone stays in the rollup: times only move outward
        assert counted["first_started_at"] is None or first <= counted["first_started_at"]
        assert counted["last_finished_at"] is None or last >= counted["last_finished_at"]


def assert_days_agree(db) -> None:
    """daily_stats per day: the rows that finished that day, counted again."""
    with db.connect() as conn:
        rows = conn.execute(sa.select(results).where(results.c.finished_at.is_not(None))).all()
        days = {r.day: r for r in conn.execute(sa.select(daily_stats))}
    expected = {}
    for r in rows:
        day = expected.setdefault(
            as_utc(r.finished_at).date(),
            dict.fromkeys(
                (
                    "documents",
                    "succeeded",
                    "failed",
                    "cancelled",
                    "expired",
                    "deduplicated",
                    "prompt_tokens",
                ),
                0,
            ),
        )
        day["documents"] += 1
        day[r.status] += 1
        day["deduplicated"] += bool(r.deduplicated)
        day["prompt_tokens"] += 0 if r.deduplicated else r.prompt_tokens or 0
    assert {d: {k: getattr(row, k) for k in expected[d]} for d, row in days.items()} == expected


def test_rollups_agree_with_a_recount_after_submit_drain_retry_cancel_expiry_requeue_and_delete(
    settings, db, tmp_path
):
    client = redis.Redis.from_url(settings.broker_url)
    make_week(settings, db, tmp_path)  # submit and drain; one refused until failed, one unreadable
    for batch in ("monday", "tuesday"):
        assert_rollup_agrees(db, batch, exact_times=True)
    assert_days_agree(db)
    assert stats(db, "tuesday").failed == 2

    retried = batches.retry_failed(db, settings, "tuesday")
    assert retried.rows == 1
    assert (stats(db, "tuesday").failed, stats(db, "tuesday").queued) == (1, 1)
    assert_rollup_agrees(db, "tuesday", exact_times=False)
    assert_days_agree(db)

    assert batches.cancel(db, "tuesday") == 1
    assert stats(db, "tuesday").cancelled == 1
    assert_rollup_agrees(db, "tuesday", exact_times=False)
    assert_days_agree(db)

    # Thursday's batch expires with two documents still queued, one running.
    submit(
        settings, db, tmp_path, "thursday", {f"h{i}.txt": f"thursday note {i}" for i in range(3)}
    )
    with db.begin() as conn:
        conn.execute(
            results.update()
            .where(results.c.batch == "thursday", results.c.source_path.like("%h0.txt"))
            .values(status="running", started_at=utcnow())
        )
        conn.execute(
            batches_table.update()
            .where(batches_table.c.name == "thursday")
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    assert expire_overdue(db) == 2
    assert (stats(db, "thursday").expired, stats(db, "thursday").running) == (2, 1)
    assert stats(db, "thursday").cancelled == 0
    assert_rollup_agrees(db, "thursday", exact_times=False)
    assert_days_agree(db)

    # Wednesday: a worker claims documents, hands some back, and dies holding the rest.
    wednesday = {f"w{i}.txt": f"wednesday memo {i} " * (i + 2) for i in range(6)}
    wednesday["again.txt"] = TUESDAY["t01.txt"]  # deduplicated: summarized on tuesday
    wednesday["stuck.txt"] = (
        "stuck"  # the stand-in engine's summary of it loops even when asked not to
    )
    submit(settings, db, tmp_path, "wednesday", wednesday)
    assert_rollup_agrees(db, "wednesday", exact_times=True)
    with db.connect() as conn:
        keys = sorted(
            conn.execute(
                sa.select(results.c.result_key).where(
                    results.c.batch == "wednesday",
                    results.c.status == "queued",
                    sa.not_(results.c.deduplicated),
                )
            ).scalars()
        )
    recorder = Recorder(db)
    recorder.claim(keys)
    assert stats(db, "wednesday").running == 7
    assert_rollup_agrees(db, "wednesday", exact_times=True)
    recorder.release(keys[:2])  # handed back on SIGTERM
    assert (stats(db, "wednesday").running, stats(db, "wednesday").queued) == (5, 2)
    assert_rollup_agrees(db, "wednesday", exact_times=False)
    client.delete(settings.queue)  # Redis lost every message; the worker died holding four
    with db.begin() as conn:  # and its leases on them ran out
        conn.execute(results.update().values(lease_until=utcnow() - timedelta(seconds=1)))
    requeued = requeue_stranded(db, client, settings, older_than_s=0, batch="wednesday")
    assert requeued.documents == 7
    assert stats(db, "wednesday").running == 0
    assert_rollup_agrees(db, "wednesday", exact_times=False)

    summarize_queued(settings, db, "wednesday")
    assert stats(db, "wednesday").succeeded == 8
    assert quality_recount(db, "wednesday")["looped"] == 1
    assert_rollup_agrees(db, "wednesday", exact_times=False)
    assert_days_agree(db)

    with db.begin() as conn:
        conn.execute(results.delete().where(results.c.batch == "monday"))
    assert stats(db, "monday").documents == 0
    assert_rollup_agrees(db, "monday", exact_times=False)
    assert_days_agree(db)


@pytest.mark.slow  # a worker process, and a visibility timeout of 10 s to wait out
def test_rollups_agree_with_a_recount_after_a_worker_is_killed_mid_batch(env, db, tmp_path):
    """A real `summarize worker` (the instant engine) killed with SIGKILL while it holds
    documents; another takes them on once their messages come back: one row each, and the
    rollups and days agree with the rows."""
    env = env | {"SUMMARIZE_MODEL": "echo", "SUMMARIZE_VISIBILITY_TIMEOUT_S": "10"}
    files = {f"n{i:05d}.txt": f"Note {i} of the night. It says little more." for i in range(4000)}
    submit(Settings.from_env(env), db, tmp_path, "night", files)  # to the echo model's queue

    def counted(status: str) -> int:
        return getattr(stats(db, "night"), status)

    with Worker(env, tmp_path / "killed.log") as worker:
        deadline = time.monotonic() + 120
        while not (counted("succeeded") and counted("running")):
            assert worker.process.poll() is None and time.monotonic() < deadline, worker.tail()
            time.sleep(0.01)
        worker.kill()  # SIGKILL, holding documents
    held = counted("running")
    assert held > 0 and counted("succeeded") < len(files)
    assert_rollup_agrees(db, "night", exact_times=True)

    with Worker(env, tmp_path / "after.log", "--burst") as after:
        assert after.wait(300) == 0, after.tail()
    with db.connect() as conn:
        rows = conn.execute(sa.select(results).where(results.c.batch == "night")).all()
    assert sorted(r.source_path.rsplit("/", 1)[-1] for r in rows) == sorted(files)
    assert {r.status for r in rows} == {"succeeded"}
    assert max(r.attempts for r in rows) == 2  # those it held were taken on again
    assert_rollup_agrees(db, "night", exact_times=False)
    assert_days_agree(db)


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_submit_vacuums_the_rollups_on_postgresql(settings, db, tmp_path):
    """Each change to rows leaves old versions of their rollup rows; without autovacuum
    (off on this project's test server) readers would read them all."""
    submit(settings, db, tmp_path, "tuesday", TUESDAY)
    with db.connect() as conn:
        vacuumed = conn.execute(
            sa.text(
                "SELECT relname FROM pg_stat_user_tables WHERE last_vacuum IS NOT NULL "
                "AND relname = ANY(:tables)"
            ),
            {"tables": [t.name for t in ROLLUPS]},
        ).scalars()
        assert sorted(vacuumed) == sorted(t.name for t in ROLLUPS)


def test_the_quality_rollup_of_rows_written_before_it_is_filled_in_by_its_migration(
    settings, db, tmp_path
):
    make_week(settings, db, tmp_path)
    command.downgrade(database.alembic_config(settings), "0005")
    assert "quality_rollups" not in sa.inspect(db).get_table_names()

    database.upgrade(settings)

    for batch in ("monday", "tuesday"):
        assert_rollup_agrees(db, batch, exact_times=True)
    assert quality_recount(db, "tuesday")["summaries"] == 14


def test_documents_that_expired_before_the_expired_status_become_expired_by_its_migration(
    settings, db, tmp_path
):
    make_week(settings, db, tmp_path)
    command.downgrade(database.alembic_config(settings), "0008")
    with db.begin() as conn:  # how 0008's sweep ended them: cancelled, with the expiry error
        conn.execute(
            sa.text(
                "UPDATE results SET status = 'cancelled', error = :error, finished_at = :now "
                "WHERE batch = 'tuesday' AND status = 'succeeded' AND NOT deduplicated"
            ),
            {"error": EXPIRED, "now": utcnow()},
        )
        cancelled_before = conn.execute(
            sa.text("SELECT cancelled FROM batch_stats WHERE batch = 'tuesday'")
        ).scalar()

    database.upgrade(settings)

    assert cancelled_before > 0
    assert (stats(db, "tuesday").expired, stats(db, "tuesday").cancelled) == (cancelled_before, 0)
    for batch in ("monday", "tuesday"):
        assert_rollup_agrees(db, batch, exact_times=False)
    assert_days_agree(db)
    command.downgrade(database.alembic_config(settings), "0008")  # and back: cancelled again
    with db.connect() as conn:
        assert (
            conn.execute(
                sa.text("SELECT cancelled FROM batch_stats WHERE batch = 'tuesday'")
            ).scalar()
            == cancelled_before
        )
    inspector = sa.inspect(db)
    for table in ("batch_rollups", "daily_rollups"):
        assert "expired" not in {c["name"] for c in inspector.get_columns(table)}
    with pytest.raises(sa.exc.IntegrityError), db.begin() as conn:  # 0008's CHECK again
        conn.execute(sa.text("UPDATE results SET status = 'expired' WHERE batch = 'monday'"))
