"""A batch's priority: a worker takes an urgent batch's documents before a backlog's, even
ones queued behind it, and the requeue sweep queues them again at it."""

from __future__ import annotations

import json
import time

import pytest
import redis
import sqlalchemy as sa

from core import messages, requeue
from core.settings import Settings
from core.tables import results
from tests.stack import Worker, cli


def records(path, batch: str, count: int):
    """A JSON lines file of `count` distinct short texts."""
    with path.open("w") as out:
        for i in range(count):
            text = f"Report {i} of {batch}: the council met and approved item {i * 7919}."
            out.write(json.dumps({"id": f"{batch}-{i}", "text": text}) + "\n")
    return path


def done(env, batch: str) -> int:
    db = sa.create_engine(env["SUMMARIZE_DATABASE_URL"], poolclass=sa.pool.NullPool)
    with db.connect() as conn:
        return conn.execute(
            sa.select(sa.func.count()).where(
                results.c.batch == batch, results.c.status == "succeeded"
            )
        ).scalar()


@pytest.mark.slow
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_urgent_batch_submitted_behind_a_backlog_of_100000_finishes_first(env, tmp_path):
    env = env | {"SUMMARIZE_MODEL": "echo"}
    backlog = records(tmp_path / "backlog.jsonl", "backlog", 100_000)
    urgent = records(tmp_path / "urgent.jsonl", "urgent", 100)
    queued = cli(env, "submit", str(backlog), "--batch", "backlog", "--priority", "low")
    assert queued.returncode == 0, queued.stderr

    with Worker(env, tmp_path / "worker.log") as worker:
        worker.wait_ready(120)
        while done(env, "backlog") < 2_000:  # the worker is deep in the backlog
            time.sleep(0.2)
        asked = cli(env, "submit", str(urgent), "--batch", "urgent", "--priority", "high")
        assert asked.returncode == 0, asked.stderr
        while done(env, "urgent") < 100:
            assert worker.process.poll() is None, worker.tail()
            time.sleep(0.1)
        backlog_then = done(env, "backlog")

    # The urgent batch went past everything the backlog still had waiting.
    assert backlog_then < 50_000, backlog_then
    print(f"\nurgent batch done with {backlog_then:,} of the backlog's 100,000 done")


def test_the_sweep_queues_a_stranded_document_again_at_its_batchs_priority(
    env, tmp_path, redis_url
):
    env = env | {"SUMMARIZE_MODEL": "echo"}
    queued = cli(
        env,
        "submit",
        str(records(tmp_path / "u.jsonl", "u", 3)),
        "--batch",
        "u",
        "--priority",
        "high",
    )
    assert queued.returncode == 0, queued.stderr
    client = redis.Redis.from_url(redis_url)
    home = messages.home(Settings.from_env(env))
    urgent, normal, low = messages.lists_of(home)
    assert (client.llen(urgent), client.llen(normal), client.llen(low)) == (1, 0, 0)

    client.delete(urgent)  # Redis lost the message: the sweep finds the rows stranded
    settings = Settings.from_env(env)
    from core import database

    db = database.connect(settings)
    swept = requeue.requeue_stranded(db, client, settings, older_than_s=0)
    db.dispose()
    assert swept.documents == 3
    assert (client.llen(urgent), client.llen(normal), client.llen(low)) == (1, 0, 0)
