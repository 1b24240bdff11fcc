"""The dashboard views say what `summarize status` says, on SQLite and on PostgreSQL.

The batches are made by the real code path (tests/batches.py): files submitted to
the real Redis, summarized by the real drain loop and recorder with the stand-in
engine, one of them refused by the engine until it fails, one unreadable, one
deduplicated.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from alembic import command

from core import database
from core.tables import batches, results
from readers.status import batch_status
from readers.views import (
    PERCENTILE_ERROR,
    VIEWS,
    as_utc,
    batch_stats,
    daily_stats,
    document_seconds,
    failures,
)
from tests.batches import (
    COUNTED,
    MONDAY,
    TUESDAY,
    durations,
    recount,
    submit,
    summarize_queued,
)


def view_rows(db, view, key: str) -> dict:
    with db.connect() as conn:
        return {getattr(r, key): r for r in conn.execute(sa.select(view))}


COUNTS = ("documents", "queued", "running", "succeeded", "failed", "cancelled", "deduplicated")


def counts(row) -> dict[str, int]:
    return {name: getattr(row, name) for name in COUNTS}


def assert_agrees(row, batch_rows: dict) -> None:
    """A batch_stats row holds what its rows say, counted again: counts and times exactly."""
    assert {name: getattr(row, name) for name in COUNTED} == {n: batch_rows[n] for n in COUNTED}
    times = (as_utc(row.first_started_at), as_utc(row.last_finished_at))
    assert times == (batch_rows["first_started_at"], batch_rows["last_finished_at"])
    wall = (times[1] - times[0]).total_seconds() if None not in times else None
    assert row.wall_s == pytest.approx(wall)
    assert row.documents_per_s == pytest.approx(batch_rows["generated"] / wall if wall else None)
    tokens_per_s = batch_rows["completion_tokens"] / wall if wall else None
    assert row.completion_tokens_per_s == pytest.approx(tokens_per_s)


def about(seconds: float | None):
    """A percentile as the views report it: within the histogram's bound of the exact value."""
    return pytest.approx(seconds, rel=PERCENTILE_ERROR)


def nearest_rank(values: list[float], percent: int) -> float | None:
    """The value at rank ceil(percent/100 * n) of the sorted values: the views' definition."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[-(-percent * len(ordered) // 100) - 1]


def test_batch_stats_agree_with_their_rows_once_batches_are_done(week):
    found = view_rows(week, batch_stats, "batch")

    assert sorted(found) == ["monday", "tuesday"]
    for batch in found:
        assert_agrees(found[batch], recount(week, batch))
    tuesday = found["tuesday"]
    assert counts(tuesday) == {
        "documents": 16,
        "queued": 0,
        "running": 0,
        "succeeded": 14,
        "failed": 2,
        "cancelled": 0,
        "deduplicated": 1,
    }
    assert tuesday.failure_rate == pytest.approx(2 / 16)
    assert found["monday"].failure_rate == 0


def test_batch_stats_agree_with_their_rows_while_documents_are_queued(settings, db, tmp_path):
    submit(settings, db, tmp_path, "monday", MONDAY)
    summarize_queued(settings, db, "monday")
    submit(settings, db, tmp_path, "tuesday", TUESDAY)

    tuesday = view_rows(db, batch_stats, "batch")["tuesday"]

    assert_agrees(tuesday, recount(db, "tuesday"))
    assert (tuesday.queued, tuesday.succeeded, tuesday.failed) == (14, 1, 1)
    assert tuesday.wall_s is None  # only the unreadable file has finished; it never started
    assert tuesday.documents_per_s is None
    assert tuesday.p50_document_s is None


def test_batch_percentiles_are_within_the_bound_of_the_nearest_rank_of_each_documents_time(week):
    found = view_rows(week, batch_stats, "batch")

    for batch in ("monday", "tuesday"):
        seconds = durations(week, batch)
        assert len(set(seconds)) > 2  # the documents really took different times
        assert found[batch].p50_document_s == about(nearest_rank(seconds, 50))
        assert found[batch].p95_document_s == about(nearest_rank(seconds, 95))


def test_daily_stats_roll_up_the_rows_by_the_utc_day_they_finished(week):
    with week.connect() as conn:
        rows = conn.execute(sa.select(results).where(results.c.finished_at.is_not(None))).all()
    days = {as_utc(r.finished_at).date() for r in rows}

    found = view_rows(week, daily_stats, "day")

    assert set(found) == days
    for day, row in found.items():
        on_day = [r for r in rows if as_utc(r.finished_at).date() == day]
        spent = [r for r in on_day if not r.deduplicated]
        generated = [r for r in spent if r.status == "succeeded"]
        first = min(as_utc(r.started_at) for r in spent if r.started_at)
        last = max(as_utc(r.finished_at) for r in spent)
        wall = (last - first).total_seconds()
        seconds = [(r.finished_at - r.started_at).total_seconds() for r in generated]
        assert (row.batches, row.documents) == (len({r.batch for r in on_day}), len(on_day))
        assert row.succeeded == sum(r.status == "succeeded" for r in on_day)
        assert row.failed == sum(r.status == "failed" for r in on_day)
        assert row.deduplicated == sum(bool(r.deduplicated) for r in on_day)
        assert row.prompt_tokens == sum(r.prompt_tokens or 0 for r in spent)
        assert row.completion_tokens == sum(r.completion_tokens or 0 for r in spent)
        assert (as_utc(row.first_started_at), as_utc(row.last_finished_at)) == (first, last)
        assert row.wall_s == pytest.approx(wall, abs=1e-6)
        assert row.documents_per_s == pytest.approx(len(generated) / wall)
        assert row.p50_document_s == about(nearest_rank(seconds, 50))
        assert row.p95_document_s == about(nearest_rank(seconds, 95))
    if len(days) == 1:  # as it is unless the test ran across midnight UTC
        (today,) = found.values()
        assert (today.documents, today.failed, today.prompt_tokens) == (
            21,
            2,
            sum(s.prompt_tokens for s in batch_status(week, ["monday", "tuesday"])),
        )


def test_failures_lists_each_failed_document_with_its_error_and_attempts(week, tmp_path):
    found = view_rows(week, failures, "source_path")

    folder = tmp_path / "tuesday" / "corpus"
    assert sorted(found) == [str(folder / "broken.txt"), str(folder / "poison.txt")]
    poison = found[str(folder / "poison.txt")]
    assert (poison.batch, poison.attempts, len(poison.content_hash)) == ("tuesday", 3, 64)
    assert poison.error == "ValueError: the engine refused this prompt (after 3 attempts)"
    assert poison.finished_at is not None
    broken = found[str(folder / "broken.txt")]
    assert (broken.batch, broken.attempts, broken.content_hash) == ("tuesday", 0, None)
    assert broken.error == "not valid UTF-8 (byte 0xe9 at offset 3): convert it to UTF-8"


# Rows written by hand, for what a real run cannot pin down: exact times and midnight.

T0 = datetime(2026, 3, 1, 23, 59, 50, tzinfo=timezone.utc)


def add_rows(db, batch: str, rows: list[dict]) -> None:
    base = {
        "batch": batch,
        "model": "m",
        "prompt_hash": "h",
        "attempts": 1,
        "deduplicated": False,
        "created_at": T0,
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "cached_tokens": 1,
        "status": "succeeded",
        "started_at": None,
        "finished_at": None,
        "error": None,
    }
    with db.begin() as conn:
        conn.execute(
            batches.insert(),
            {
                "name": batch,
                "model": "m",
                "instruction": "i",
                "max_tokens": 8,
                "prompt_hash": "h",
                "created_at": T0,
            },
        )
        if rows:
            conn.execute(
                results.insert(),
                [base | {"source_path": f"/{i}"} | row for i, row in enumerate(rows)],
            )


def test_times_are_exact_to_the_microsecond_and_days_split_at_utc_midnight(db):
    # Twenty documents started at 23:59:50 took 1.000001 s, 2.000002 s, … 20.000020 s:
    # the first nine finished on March 1st (UTC), the other eleven on March 2nd.
    add_rows(
        db,
        "exact",
        [
            {"started_at": T0, "finished_at": T0 + timedelta(seconds=s, microseconds=s)}
            for s in range(1, 21)
        ]
        + [
            {"deduplicated": True, "started_at": T0, "finished_at": T0},
            {
                "status": "failed",
                "attempts": 3,
                "error": "boom",
                "started_at": T0,
                "finished_at": T0 + timedelta(seconds=90),
            },
            {
                "status": "queued",
                "attempts": 0,
                "prompt_tokens": None,
                "completion_tokens": None,
                "cached_tokens": None,
            },
        ],
    )
    add_rows(db, "empty", [])

    stats = view_rows(db, batch_stats, "batch")
    exact, empty = stats["exact"], stats["empty"]
    assert exact.p50_document_s == about(10.000010)
    assert exact.p95_document_s == about(19.000019)
    assert exact.wall_s == pytest.approx(90, abs=1e-9)
    assert exact.documents_per_s == pytest.approx(20 / 90)
    assert exact.completion_tokens_per_s == pytest.approx(2 * 21 / 90)
    assert (exact.documents, exact.queued, exact.succeeded, exact.failed) == (23, 1, 21, 1)
    assert (exact.prompt_tokens, exact.cached_tokens, exact.deduplicated) == (210, 21, 1)
    assert exact.failure_rate == pytest.approx(1 / 22)
    assert counts(empty) == dict.fromkeys(COUNTS, 0)
    assert (empty.prompt_tokens, empty.wall_s, empty.failure_rate) == (0, None, None)

    days = view_rows(db, daily_stats, "day")
    assert sorted(days) == [date(2026, 3, 1), date(2026, 3, 2)]
    first, second = days[date(2026, 3, 1)], days[date(2026, 3, 2)]
    assert (first.documents, first.succeeded, first.deduplicated, first.failed) == (10, 10, 1, 0)
    assert (first.p50_document_s, first.p95_document_s) == (about(5.000005), about(9.000009))
    assert first.wall_s == pytest.approx(9.000009, abs=1e-9)
    assert first.documents_per_s == pytest.approx(9 / 9.000009)
    assert (second.documents, second.succeeded, second.failed) == (12, 11, 1)
    assert (second.p50_document_s, second.p95_document_s) == (about(15.000015), about(20.00002))
    assert second.wall_s == pytest.approx(90, abs=1e-9)
    assert second.failure_rate == pytest.approx(1 / 12)


def test_a_time_in_the_last_half_millisecond_of_a_second_is_not_rounded_into_the_next(db):
    # SQLite rounds a time to the millisecond before it gives its whole seconds: 50.999700
    # was 51, and a document that took 0.4 s took -0.6 s (and one of 0.9997 s, 1.9997 s).
    late = T0.replace(microsecond=999_700)
    add_rows(
        db,
        "edge",
        [
            {"started_at": late, "finished_at": late + timedelta(seconds=0.4)},
            {"started_at": T0, "finished_at": late},
        ],
    )

    edge = view_rows(db, batch_stats, "batch")["edge"]
    with db.connect() as conn:
        took = list(
            conn.execute(
                sa.text(f"SELECT {document_seconds(db.dialect.name)} FROM results ORDER BY 1")
            ).scalars()
        )

    assert took == [pytest.approx(0.4, abs=1e-9), pytest.approx(0.9997, abs=1e-9)]
    assert (edge.p50_document_s, edge.p95_document_s) == (about(0.4), about(0.9997))


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_the_day_is_the_utc_day_whatever_the_sessions_time_zone(settings, db):
    """(SQLite has no session time zone: it stores timestamps as UTC text.)"""
    # 23:59:55 on March 1st in UTC is already 12:59:55 on March 2nd in Auckland.
    add_rows(db, "late", [{"started_at": T0, "finished_at": T0 + timedelta(seconds=5)}])
    auckland = sa.create_engine(
        settings.database_url, connect_args={"options": "-c timezone=Pacific/Auckland"}
    )
    with auckland.connect() as conn:
        assert conn.execute(sa.select(daily_stats.c.day)).scalars().all() == [date(2026, 3, 1)]
    auckland.dispose()


def test_downgrading_drops_the_views_and_upgrading_brings_them_back(settings, db):
    command.downgrade(database.alembic_config(settings), "0001")
    assert sa.inspect(db).get_view_names() == []

    database.upgrade(settings)
    assert sorted(sa.inspect(db).get_view_names()) == sorted(VIEWS)
