"""One queue per model: a batch for model X waits where only workers running X take it, and
`status` and `doctor` say when documents wait for a model no live worker serves."""

from __future__ import annotations

import json
import signal
import time

import redis
import sqlalchemy as sa

from core import messages, presence, redis_state
from core.requeue import requeue_stranded
from core.settings import DEFAULT_MODEL_NAME
from core.tables import results
from jobs.batches import retry_failed
from summarize.doctor import check_workers
from tests.helpers import queued_messages, run, write
from tests.stack import Worker, cli, embedded_env

OTHER = "Qwen/Qwen2.5-0.5B-Instruct"


def keys_in(client, name: str) -> list[str]:
    return [k for m in client.lrange(name, 0, -1) for k in redis_state._keys_of(m)]


def test_the_default_model_keeps_the_queue_and_every_other_model_gets_its_own():
    assert messages.queue_for("summarize", DEFAULT_MODEL_NAME) == "summarize"
    assert messages.queue_for("summarize", "echo") == "summarize.echo-092c79e8"
    assert messages.queue_for("q", OTHER) == "q.Qwen2.5-0.5B-Instruct-4b05be1d"
    # two folders with one name are two models, with two queues
    assert messages.queue_for("q", "/a/model") != messages.queue_for("q", "/b/model")


def test_a_batch_for_another_model_is_queued_where_only_its_workers_look(env, db, tmp_path):
    write(tmp_path / "in", "a.txt", "Alpha is first.")

    result = run(env, "submit", str(tmp_path / "in"), "--batch", "qwen", "--model", OTHER)

    assert result.exit_code == 0, result.output
    client = redis.Redis.from_url(env["SUMMARIZE_BROKER_URL"])
    assert queued_messages(env) == []  # nothing in the default model's queue
    (key,) = keys_in(client, messages.queue_for(env["SUMMARIZE_QUEUE"], OTHER))
    with db.connect() as conn:
        assert conn.execute(sa.select(results.c.model, results.c.result_key)).one() == (OTHER, key)


def test_retry_and_the_requeue_sweep_send_each_document_to_its_models_queue(settings, db, tmp_path):
    write(tmp_path / "a", "a.txt", "Alpha.")
    write(tmp_path / "b", "b.txt", "Beta.")
    run(settings_env(settings), "submit", str(tmp_path / "a"), "--batch", "mine")
    run(
        settings_env(settings), "submit", str(tmp_path / "b"), "--batch", "theirs", "--model", OTHER
    )
    client = redis.Redis.from_url(settings.broker_url)
    theirs = messages.queue_for(settings.queue, OTHER)
    client.delete(settings.queue, theirs)  # Redis lost every message

    requeued = requeue_stranded(db, client, settings, older_than_s=0)

    assert requeued.documents == 2
    assert len(keys_in(client, settings.queue)) == 1 and len(keys_in(client, theirs)) == 1
    client.delete(settings.queue, theirs)
    with db.begin() as conn:
        conn.execute(results.update().values(status="failed", error="x"))

    retried = retry_failed(db, settings, "theirs")  # from a process of the default model

    assert retried.documents == 1
    assert keys_in(client, settings.queue) == [] and len(keys_in(client, theirs)) == 1


def settings_env(settings) -> dict[str, str]:
    return {
        "SUMMARIZE_DATA_DIR": str(settings.data_dir),
        "SUMMARIZE_DATABASE_URL": settings.database_url,
        "SUMMARIZE_BROKER_URL": settings.broker_url,
        "SUMMARIZE_QUEUE": settings.queue,
    }


def test_heartbeats_say_which_workers_live_and_what_they_serve(settings):
    client = redis.Redis.from_url(settings.broker_url)
    presence.heartbeat(client, settings, "w1@host", since=100.0)
    presence.heartbeat(client, settings.with_changes(model=OTHER), "w2@host", since=200.0)

    live = presence.live_workers(client, settings.queue)

    assert live == {
        "w1@host": {"model": DEFAULT_MODEL_NAME, "queue": settings.queue, "since": 100.0},
        "w2@host": {"model": OTHER, "queue": messages.queue_for(settings.queue, OTHER), "since": 200.0},
    }  # fmt: skip
    assert 0 < client.ttl(f"{settings.queue}.worker:w1@host") <= 3 * presence.HEARTBEAT_S
    presence.gone(client, settings, "w1@host")
    assert set(presence.live_workers(client, settings.queue)) == {"w2@host"}


def test_status_and_doctor_say_when_documents_wait_for_a_model_no_live_worker_serves(
    env, settings, tmp_path
):
    write(tmp_path / "in", "a.txt", "Alpha.")
    write(tmp_path / "in", "b.txt", "Beta.")
    run(env, "submit", str(tmp_path / "in"), "--batch", "qwen", "--model", OTHER)
    client = redis.Redis.from_url(env["SUMMARIZE_BROKER_URL"])
    presence.heartbeat(client, settings, "w1@host", since=0.0)  # a worker of the default model

    shown = run(env, "status", "qwen")
    listed = json.loads(run(env, "status", "qwen", "--json").output)
    check = check_workers(settings)

    line = (
        f"2 documents wait for model {OTHER!r}, which no live worker serves: start one with "
        f"SUMMARIZE_MODEL={OTHER} summarize worker"
    )
    assert shown.output.splitlines()[-1] == line
    assert listed[0]["workers"] == 0
    assert not check.ok
    assert check.found == f"1 live worker(s): {DEFAULT_MODEL_NAME} ×1; {line}"

    presence.heartbeat(client, settings.with_changes(model=OTHER), "w2@host", since=0.0)
    assert line not in run(env, "status", "qwen").output
    assert json.loads(run(env, "status", "qwen", "--json").output)[0]["workers"] == 1
    assert check_workers(settings).ok


def test_a_worker_takes_only_its_models_documents_and_announces_itself(
    tmp_path, redis_url, queue_name
):
    env = embedded_env(tmp_path, redis_url, queue_name, "echo")
    write(tmp_path / "echo", "a.txt", "Echo me. Later.")
    write(tmp_path / "other", "b.txt", "Not for echo. Really.")

    with Worker(env, tmp_path / "worker.log") as worker:
        worker.wait_ready(120)
        assert cli(env, "submit", str(tmp_path / "echo"), "--batch", "echo").returncode == 0
        other = cli(env, "submit", str(tmp_path / "other"), "--batch", "other", "--model", OTHER)
        assert other.returncode == 0
        deadline = time.monotonic() + 60
        while "succeeded" not in cli(env, "status", "echo").stdout and time.monotonic() < deadline:
            time.sleep(0.3)
        status = cli(env, "status")
        live = presence.live_workers(redis.Redis.from_url(redis_url), queue_name)
        worker.signal(signal.SIGTERM)
        assert worker.wait(60) == 0, worker.tail()

    assert [about["model"] for about in live.values()] == ["echo"]
    assert f"1 document waits for model {OTHER!r}, which no live worker serves" in status.stdout
    after = presence.live_workers(redis.Redis.from_url(redis_url), queue_name)
    assert after == {}  # a worker that stops says so at once
    db = sa.create_engine(f"sqlite:///{tmp_path / 'data' / 'summarize.db'}")
    with db.connect() as conn:
        found = dict(conn.execute(sa.select(results.c.batch, results.c.status)).all())
    db.dispose()
    assert found == {"echo": "succeeded", "other": "queued"}
