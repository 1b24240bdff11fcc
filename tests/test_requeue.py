"""The database is the source of truth: documents whose message Redis lost are queued again."""

from __future__ import annotations

import json

import redis
import sqlalchemy as sa

from core import producer, redis_state
from core.requeue import requeue_stranded, sweep
from core.tables import results
from core.transport import UNACKED
from tests.helpers import run, write


def submit(env, folder, batch="b"):
    result = run(env, "submit", str(folder), "--batch", batch)
    assert result.exit_code == 0, result.output


def statuses(db):
    with db.connect() as conn:
        return sorted(conn.execute(sa.select(results.c.status)).scalars())


def test_nothing_is_requeued_while_every_document_has_its_message(env, settings, db, tmp_path):
    write(tmp_path / "in", "a.txt", "A.")
    submit(env, tmp_path / "in")
    client = redis.Redis.from_url(env["SUMMARIZE_BROKER_URL"])

    done = requeue_stranded(db, client, settings, older_than_s=0)

    assert (done.documents, done.rows) == (0, 0)
    assert client.llen(env["SUMMARIZE_QUEUE"]) == 1


def test_after_redis_loses_everything_pending_documents_are_queued_again(
    env, settings, db, tmp_path
):
    write(tmp_path / "in", "a.txt", "A.")
    write(tmp_path / "in", "b.txt", "B.")
    write(tmp_path / "in", "twin.txt", "B.")
    submit(env, tmp_path / "in")
    with db.begin() as conn:  # a worker had taken one on when Redis went away
        conn.execute(
            results.update()
            .where(results.c.source_path.like("%a.txt"))
            .values(status="running", attempts=1)
        )
    client = redis.Redis.from_url(env["SUMMARIZE_BROKER_URL"])
    client.flushdb()

    done = requeue_stranded(db, client, settings, older_than_s=0)

    assert (done.documents, done.rows) == (2, 3)
    assert client.llen(env["SUMMARIZE_QUEUE"]) == 1  # one message carries both
    assert statuses(db) == ["queued", "queued", "queued"]


def test_a_backlog_larger_than_a_page_is_compared_and_pushed_a_page_at_a_time(
    env, settings, db, tmp_path, monkeypatch
):
    monkeypatch.setattr("core.requeue.PAGE_ROWS", 2)
    for name in "abcde":
        write(tmp_path / "in", f"{name}.txt", f"{name.upper()}.")
    write(tmp_path / "in", "twin.txt", "E.")  # a second row of one document, on a later page
    submit(env, tmp_path / "in")
    client = redis.Redis.from_url(env["SUMMARIZE_BROKER_URL"])
    client.flushdb()
    producer.enqueue(settings, [_key_of(db, "a.txt")])  # one document kept its message

    done = requeue_stranded(db, client, settings, older_than_s=0)

    assert (done.documents, done.rows) == (4, 5)
    pushed = redis_state.keys_in_redis(client, settings.queue)
    assert len(pushed) == 5  # each document's key once: a's old message, four new ones
    assert requeue_stranded(db, client, settings, older_than_s=0).documents == 0


def _key_of(db, name: str) -> str:
    with db.connect() as conn:
        return conn.execute(
            sa.select(results.c.result_key).where(results.c.source_path.like(f"%{name}"))
        ).scalar_one()


def test_a_message_held_by_a_worker_is_not_stranded(env, settings, db, tmp_path):
    write(tmp_path / "in", "a.txt", "A.")
    submit(env, tmp_path / "in")
    client = redis.Redis.from_url(env["SUMMARIZE_BROKER_URL"])
    message = client.rpop(env["SUMMARIZE_QUEUE"])  # as kombu does when a worker takes it
    client.hset(UNACKED, "tag-1", json.dumps([json.loads(message), "", env["SUMMARIZE_QUEUE"]]))

    done = requeue_stranded(db, client, settings, older_than_s=0)

    assert done.documents == 0
    assert client.llen(env["SUMMARIZE_QUEUE"]) == 0


def test_documents_submitted_a_moment_ago_are_left_alone(env, settings, db, tmp_path):
    write(tmp_path / "in", "a.txt", "A.")
    submit(env, tmp_path / "in")
    client = redis.Redis.from_url(env["SUMMARIZE_BROKER_URL"])
    client.flushdb()

    assert requeue_stranded(db, client, settings, older_than_s=60).documents == 0


def test_the_requeue_command_reports_what_it_put_back(env, settings, db, tmp_path):
    write(tmp_path / "in", "a.txt", "A.")
    submit(env, tmp_path / "in", batch="night")
    redis.Redis.from_url(env["SUMMARIZE_BROKER_URL"]).flushdb()

    result = run(env, "requeue", "night", "--older-than", "0")

    assert result.exit_code == 0, result.output
    assert result.output == "Queued 1 document again (1 row) that had no message in Redis.\n"


def test_the_sweep_looks_only_when_redis_lost_its_data_or_holds_nothing(
    env, settings, db, tmp_path
):
    write(tmp_path / "in", "a.txt", "A.")
    write(tmp_path / "in", "b.txt", "B.")
    submit(env, tmp_path / "in")
    client = redis.Redis.from_url(env["SUMMARIZE_BROKER_URL"])

    # The first sweep on this Redis finds no marker: it compares, and everything is there.
    assert sweep(db, client, settings, older_than_s=0).documents == 0
    # A message lost alone, with the marker kept, is not looked for (requeue finds it)...
    client.delete(settings.queue)
    producer.enqueue(settings, ["0" * 64])  # something else still waits
    assert sweep(db, client, settings, older_than_s=0).documents == 0
    assert requeue_stranded(db, client, settings, older_than_s=0).documents == 2
    # ...but a Redis that lost its data has lost the marker too, and the sweep puts all back.
    client.flushdb()
    assert sweep(db, client, settings, older_than_s=0).documents == 2


def test_a_backlog_larger_than_any_scan_limit_is_compared_in_full(env, settings, db, tmp_path):
    write(tmp_path / "in", "a.txt", "A.")
    write(tmp_path / "in", "b.txt", "B.")
    submit(env, tmp_path / "in")
    client = redis.Redis.from_url(env["SUMMARIZE_BROKER_URL"])
    (ours,) = client.lrange(settings.queue, 0, -1)
    client.delete(settings.queue)
    producer.enqueue(settings, ["0" * 64])
    (other,) = client.lrange(settings.queue, 0, -1)
    pipe = client.pipeline()
    for _ in range(60):  # 60,000 messages of other documents, then ours at the back
        pipe.lpush(settings.queue, *([other] * 1000))
    pipe.rpush(settings.queue, ours)
    pipe.execute()

    done = requeue_stranded(db, client, settings, older_than_s=0)

    assert done.documents == 0  # both found behind 60,000 others: nothing requeued
    client.rpop(settings.queue)
    assert requeue_stranded(db, client, settings, older_than_s=0).documents == 2
