"""A year of results without a year of corpora: texts go when no row needs them, old rows on purge.

Every test runs on SQLite and on PostgreSQL, with the real drain loop and recorder
(a stand-in engine) and the real `summarize purge` command.
"""

from __future__ import annotations

import re
import threading
import time
from datetime import timedelta
from importlib import import_module

import sqlalchemy as sa

from core import retention
from core.tables import batches as batches_table
from core.tables import documents, results, utcnow
from jobs import batches
from readers.views import GENERATED, batch_stats, document_seconds
from tests.batches import COUNTED, MONDAY, TUESDAY, make_week, recount, submit, summarize_queued
from tests.helpers import run


def texts(db) -> dict[str, str | None]:
    """Each document's text (None where only its hash is kept), by the file names using it."""
    with db.connect() as conn:
        found = conn.execute(
            sa.select(results.c.source_path, documents.c.body).join(
                documents, documents.c.content_hash == results.c.content_hash
            )
        ).all()
    return {path.rsplit("/", 1)[-1]: body for path, body in found}


def stored_documents(db) -> int:
    with db.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(documents)).scalar_one()


def test_a_text_is_dropped_once_its_summary_is_written_and_kept_while_it_can_be_retried(
    settings, db, tmp_path
):
    make_week(settings, db, tmp_path)  # tuesday: poison.txt failed after every attempt

    kept = {name: body for name, body in texts(db).items() if body is not None}
    assert kept == {"poison.txt": "poison pill"}  # `summarize retry` needs it
    with db.connect() as conn:  # hashes and sizes stay
        assert (
            conn.execute(sa.select(sa.func.count()).where(documents.c.size_bytes > 0)).scalar_one()
            == len(MONDAY) + len(TUESDAY) - 2
        )  # one repeat, one never stored

    batches.retry_failed(db, settings, "tuesday")
    summarize_queued(settings, db, "tuesday")  # refused again: failed, and kept
    assert texts(db)["poison.txt"] == "poison pill"


def test_a_text_submitted_again_is_stored_again_and_summarized(settings, db, tmp_path):
    submit(settings, db, tmp_path, "monday", MONDAY)
    summarize_queued(settings, db, "monday")
    assert set(texts(db).values()) == {None}

    other_prompt = settings.with_changes(instruction="List the numbers in the document.")
    submit(other_prompt, db, tmp_path, "monday-numbers", MONDAY)
    with db.connect() as conn:
        again = conn.execute(
            sa.select(results.c.source_path, documents.c.body)
            .join(documents, documents.c.content_hash == results.c.content_hash)
            .where(results.c.batch == "monday-numbers")
        ).all()
    assert {path.rsplit("/", 1)[-1]: body for path, body in again} == MONDAY
    summarize_queued(other_prompt, db, "monday-numbers")
    assert recount(db, "monday-numbers")["succeeded"] == len(MONDAY)
    assert set(texts(db).values()) == {None}


def test_summarize_keep_texts_keeps_every_text(settings, db, tmp_path):
    keeping = settings.with_changes(keep_texts=True)
    submit(keeping, db, tmp_path, "monday", MONDAY)
    summarize_queued(keeping, db, "monday")
    assert recount(db, "monday")["succeeded"] == len(MONDAY)
    assert texts(db) == MONDAY


def test_cancelled_documents_lose_their_texts(settings, db, tmp_path):
    submit(settings, db, tmp_path, "monday", MONDAY)
    assert batches.cancel(db, "monday") == len(MONDAY)
    assert set(texts(db).values()) == {None}


def test_purge_before_a_date_deletes_old_rows_their_documents_and_empty_batches(
    env, settings, db, tmp_path
):
    make_week(settings, db, tmp_path)
    with db.begin() as conn:  # monday's rows (and batch) are from last month
        old = utcnow() - timedelta(days=40)
        conn.execute(
            results.update()
            .where(results.c.batch == "monday")
            .values(created_at=old, started_at=old, finished_at=old + timedelta(seconds=1))
        )
        conn.execute(
            batches_table.update().where(batches_table.c.name == "monday"), {"created_at": old}
        )
    cutoff = (utcnow() - timedelta(days=30)).strftime("%Y-%m-%d")

    done = run(env, "purge", "--before", cutoff)

    assert done.exit_code == 0, done.output
    assert f"Purged {len(MONDAY)} rows" in done.output
    assert "1 batch left empty" in done.output
    with db.connect() as conn:
        left = set(conn.execute(sa.select(results.c.batch).distinct()).scalars())
        names = set(conn.execute(sa.select(batches_table.c.name)).scalars())
    assert left == names == {"tuesday"}
    # monday's texts had one repeat on tuesday ("again.txt"): that document stays
    assert stored_documents(db) == len(TUESDAY) - 1
    counted = recount(db, "tuesday")
    with db.connect() as conn:
        row = conn.execute(sa.select(batch_stats).where(batch_stats.c.batch == "tuesday")).one()
    assert {n: getattr(row, n) for n in COUNTED} == {n: counted[n] for n in COUNTED}


def test_purge_beside_a_running_drain_deletes_only_finished_rows_and_loses_nothing(
    settings, db, tmp_path
):
    make_week(settings, db, tmp_path)
    wednesday = {f"w{i:03}.txt": f"wednesday memo {i} " * 5 for i in range(150)}
    wednesday["again.txt"] = TUESDAY["t01.txt"]  # deduplicated: its text is tuesday's
    submit(settings, db, tmp_path, "wednesday", wednesday)
    drain = threading.Thread(target=summarize_queued, args=(settings, db, "wednesday"))
    drain.start()
    while recount(db, "wednesday")["succeeded"] < 20:  # the drain is well under way
        time.sleep(0.01)
    purged = [retention.purge(db, batch=b, step=7) for b in ("tuesday", "wednesday")]
    drain.join(60)
    assert not drain.is_alive()

    assert purged[0].batches == ["tuesday"]
    assert 20 <= purged[1].rows < len(wednesday)  # the finished rows, not the pending ones
    assert purged[1].batches == []
    counted = recount(db, "wednesday")
    assert purged[1].rows + counted["documents"] == len(wednesday)
    assert counted["succeeded"] == counted["documents"]  # every pending row got its outcome
    with db.connect() as conn:
        row = conn.execute(sa.select(batch_stats).where(batch_stats.c.batch == "wednesday")).one()
        orphans = conn.execute(
            sa.select(sa.func.count())
            .select_from(results)
            .outerjoin(documents, documents.c.content_hash == results.c.content_hash)
            .where(results.c.content_hash.is_not(None), documents.c.content_hash.is_(None))
        ).scalar_one()
    assert orphans == 0
    assert {n: getattr(row, n) for n in COUNTED} == {n: counted[n] for n in COUNTED}
    assert set(texts(db).values()) == {None}


def test_purge_needs_a_date_or_a_batch(env, db):
    done = run(env, "purge")
    assert done.exit_code == 2
    assert "--before DATE, --batch NAME, or both" in done.output


def test_a_batchs_slowest_documents_come_from_an_index(settings, db, tmp_path):
    """The dashboard's slowest list reads ten index entries instead of sorting the batch."""
    make_week(settings, db, tmp_path)
    dialect = db.dialect.name
    assert document_seconds(dialect) == import_module("migrations.versions.0004_retention").seconds(
        dialect
    )
    query = (
        f"SELECT id FROM results WHERE batch = 'tuesday' AND {GENERATED} "
        f"ORDER BY {document_seconds(dialect)} DESC, id LIMIT 10"
    )
    with db.connect() as conn:
        if dialect == "postgresql":
            conn.execute(sa.text("SET enable_seqscan = off"))  # a tiny table: make it choose
            plan = "\n".join(conn.execute(sa.text(f"EXPLAIN {query}")).scalars())
        else:
            plan = "\n".join(
                str(row[-1]) for row in conn.execute(sa.text(f"EXPLAIN QUERY PLAN {query}"))
            )
    assert "ix_results_slowest" in plan
    assert "TEMP B-TREE FOR ORDER BY" not in plan  # only ties, if any, are sorted


def test_a_batchs_flagged_summaries_come_from_an_index(settings, db, tmp_path):
    """The dashboard's flagged list, and Grafana's, read a few entries of a partial index."""
    make_week(settings, db, tmp_path)
    for query, index in (
        (
            "SELECT * FROM flagged WHERE batch = 'tuesday' ORDER BY finished_at DESC LIMIT 100",
            "ix_results_flagged_batch",
        ),
        (
            "SELECT * FROM flagged WHERE finished_at > '2000-01-01' ORDER BY finished_at DESC "
            "LIMIT 500",
            "ix_results_flagged",
        ),
    ):
        with db.connect() as conn:
            if db.dialect.name == "postgresql":
                conn.execute(sa.text("SET enable_seqscan = off"))  # a tiny table: make it choose
                conn.execute(sa.text("SET enable_bitmapscan = off"))
                plan = "\n".join(conn.execute(sa.text(f"EXPLAIN {query}")).scalars())
            else:
                plan = "\n".join(
                    str(row[-1]) for row in conn.execute(sa.text(f"EXPLAIN QUERY PLAN {query}"))
                )
        assert re.search(rf"\b{index}\b", plan), plan
        assert "TEMP B-TREE FOR ORDER BY" not in plan and "Sort" not in plan, plan
