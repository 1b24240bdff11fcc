"""Nothing lost, nothing doubled: fault tests on the real stack.

Real worker processes, a real Redis (the machine's, or a private one the test
restarts), the real PostgreSQL (reached through a proxy the test can cut). Workers
killed mid-generation and the outages run the real engine and model; the poison
document crashes its worker before the engine sees it, so the instant engine
serves there. Each test prints what it measured.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import random
import re
import signal
import time

import pytest
import redis
from sqlalchemy.engine import make_url

from core.messages import queue_for
from tests.conftest import POSTGRES_URL, _reset_postgres
from tests.services import RedisServer, TcpProxy
from tests.stack import Worker, cli, copy_lee, rows


def count(batch: str, status: str) -> int:
    return sum(1 for r in rows(batch) if r.status == status)


def wait_for(condition, timeout_s: float, what: str, worker: Worker | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if worker is not None and worker.process.poll() is not None:
            raise AssertionError(f"the worker exited while waiting for {what}:\n{worker.tail()}")
        if time.monotonic() > deadline:
            tail = worker.tail() if worker else ""
            raise AssertionError(f"timed out waiting for {what}\n{tail}")
        time.sleep(0.5)


def engine_ready(worker: Worker) -> bool:
    return "engine ready" in worker.log_path.read_text(errors="replace")


def base_env(tmp_path, model, broker_url, queue, database_url=POSTGRES_URL) -> dict[str, str]:
    return {
        "SUMMARIZE_DATA_DIR": str(tmp_path / "data"),
        "SUMMARIZE_DATABASE_URL": database_url,
        "SUMMARIZE_BROKER_URL": broker_url,
        "SUMMARIZE_QUEUE": queue,
        "SUMMARIZE_MODEL": str(model),
        "SUMMARIZE_MAX_TOKENS": "32",
        "SUMMARIZE_MAX_MODEL_LEN": "1024",
        "SUMMARIZE_VISIBILITY_TIMEOUT_S": "10",
        "SUMMARIZE_STOP_GRACE_S": "3",
    }


@pytest.mark.engine
def test_killed_workers_lose_nothing_and_long_holds_are_not_delivered_twice(
    tmp_path, model, redis_url, queue_name
):
    _reset_postgres()
    client = redis.Redis.from_url(redis_url)
    # Few sequences at a time, many messages held: the last ones wait far longer than the
    # 10 s visibility timeout, so only renewed leases keep them from being delivered again.
    env = base_env(tmp_path, model, redis_url, queue_name) | {
        "SUMMARIZE_MAX_NUM_SEQS": "4",
        "SUMMARIZE_IN_FLIGHT": "40",
        "SUMMARIZE_CHUNK_DOCS": "4",  # seven messages, all held at once
        # A kill -9 from outside looks like a crash the document caused: three kills could
        # make an innocent document use up three attempts. Allow more than we kill.
        "SUMMARIZE_MAX_ATTEMPTS": "5",
    }
    assert (
        cli(env, "submit", str(copy_lee(tmp_path / "held", 0, 28)), "--batch", "held").returncode
        == 0
    )
    worker = Worker(env, tmp_path / "worker-0.log")
    try:
        wait_for(lambda: count("held", "succeeded") == 28, 900, "the held batch", worker)
        log = worker.log_path.read_text()
        received = len(re.findall(r"summarize\.chunk\[[^]]+\] received", log))
        # Seven chunks of four, each received once: no message was delivered a second time.
        assert (received, worker.summarized()) == (7, 28), worker.tail()
        assert {r.attempts for r in rows("held")} == {1}
        held_s = max((r.finished_at - r.created_at).total_seconds() for r in rows("held"))
        print(
            f"\nlongest hold: {held_s:.0f} s against a 10 s visibility timeout; "
            f"{received} deliveries of 7 chunks, 28 documents"
        )

        # Then a batch during which workers are killed with SIGKILL at random moments.
        corpus = copy_lee(tmp_path / "kill", 40, 48)
        assert cli(env, "submit", str(corpus), "--batch", "kill").returncode == 0
        kills = []
        rng = random.Random(7)
        for round_ in range(2):
            done_before = count("kill", "succeeded")
            wait_for(lambda n=done_before: count("kill", "succeeded") > n, 900, "progress", worker)
            time.sleep(rng.uniform(0, 4))
            in_hand = {r.result_key for r in rows("kill") if r.status == "running"}
            os.kill(worker.pid, signal.SIGKILL)  # the main process only, as the OOM killer does
            killed_at = time.time()
            worker.process.wait()
            worker.kill()  # its engine processes notice on their own; make sure before restarting
            worker = Worker(env, tmp_path / f"worker-{round_ + 1}.log")
            kills.append((killed_at, in_hand))

            taken_again: list[float] = []  # when the documents in hand were started again

            def redelivered(in_hand=in_hand, killed_at=killed_at, taken_again=taken_again):
                # A suspect given back to run apart shows no start for a moment: not yet again.
                taken_again[:] = [
                    r.started_at.timestamp()
                    for r in rows("kill")
                    if r.result_key in in_hand
                    and r.started_at is not None
                    and r.started_at.timestamp() > killed_at
                ]
                return bool(taken_again)

            wait_for(redelivered, 600, "redelivery after the kill", worker)
            first = min(taken_again)
            print(
                f"kill {round_ + 1}: {len(in_hand)} documents in hand, taken on again "
                f"{first - killed_at:.0f} s after the kill (worker restart included)"
            )

        # A graceful stop hands back what it holds at once, without waiting for a timeout.
        wait_for(lambda: engine_ready(worker) and count("kill", "running") > 0, 600, "work", worker)
        worker.signal(signal.SIGTERM)
        stopped = time.monotonic()
        assert worker.wait(120) == 0, worker.tail()
        print(f"SIGTERM: stopped in {time.monotonic() - stopped:.1f} s")
        assert client.hlen("unacked") == 0  # nothing left waiting for a visibility timeout
        assert count("kill", "running") == 0
    finally:
        worker.kill()

    with Worker(env, tmp_path / "worker-last.log", "--burst") as last:
        assert last.wait(900) == 0, last.tail()
    final = rows("kill")
    files = sorted(p.name for p in corpus.iterdir())
    assert sorted(r.source_path.rsplit("/", 1)[-1] for r in final) == files  # one row each
    lost = [r.source_path for r in final if r.status != "succeeded"]
    assert lost == []
    print(
        f"kill batch: {len(files)} documents, {len(final)} rows, lost {len(lost)}, "
        f"duplicated {len(final) - len(files)}, attempts {sorted({r.attempts for r in final})}"
    )


@pytest.mark.services
def test_a_poison_document_is_failed_after_the_limit_and_the_rest_succeed(
    tmp_path, redis_url, queue_name
):
    _reset_postgres()
    corpus = copy_lee(tmp_path / "corpus", 130, 20)
    (corpus / "poison.txt").write_text("This report is ordinary until POISON-7f3a appears.\n")
    env = base_env(tmp_path, "echo", redis_url, queue_name) | {  # the instant engine
        "SUMMARIZE_TEST_CRASH_ON": "POISON-7f3a",
        "SUMMARIZE_MAX_NUM_SEQS": "8",
    }
    assert cli(env, "submit", str(corpus), "--batch", "poison").returncode == 0

    crashes = 0
    for start in range(6):  # a supervisor (systemd, docker) restarting the worker
        with Worker(env, tmp_path / f"worker-{start}.log", "--burst") as worker:
            status = worker.wait(900)
        if status == 0:
            break
        assert status == -signal.SIGKILL, worker.tail()
        crashes += 1
    final = {r.source_path.rsplit("/", 1)[-1]: r for r in rows("poison")}
    poison = final.pop("poison.txt")
    assert poison.status == "failed"
    assert poison.error.startswith("gave up after 3 attempts: the worker stopped")
    assert {r.status for r in final.values()} == {"succeeded"}
    assert crashes == 3
    print(
        f"\npoison: {crashes} crashes, then failed; {len(final)} others succeeded with "
        f"attempts {sorted(r.attempts for r in final.values())}"
    )


def _json_envelope(body: str, queue: str, task_id: str) -> dict:
    """A Celery message as kombu's Redis transport stores it, with a JSON body of our making."""
    return {
        "body": base64.b64encode(body.encode()).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py",
            "task": "summarize.chunk",
            "id": task_id,
            "root_id": task_id,
            "retries": 0,
            "timelimit": [None, None],
        },
        "properties": {
            "delivery_tag": f"{task_id}-tag",
            "body_encoding": "base64",
            "delivery_info": {"exchange": "", "routing_key": queue},
        },
    }


class Exploit:
    """Unpickling this creates a file: proof that a pickled message was executed."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.engine
def test_a_redis_restart_and_a_database_outage_mid_batch_lose_nothing(tmp_path, model, queue_name):
    _reset_postgres()
    server = RedisServer(tmp_path / "redis", password="s3cret-pw", tls=True).start()
    proxy = TcpProxy(5432)
    database_url = make_url(POSTGRES_URL).set(port=proxy.port).render_as_string(hide_password=False)
    env = base_env(tmp_path, model, server.url, queue_name, database_url) | {
        "SUMMARIZE_MAX_NUM_SEQS": "8",
        "SUMMARIZE_IN_FLIGHT": "16",
    }
    corpus = copy_lee(tmp_path / "corpus", 160, 60)
    for name in ("with space.txt", "new\nline.txt", "ünïcödé 文書.md"):
        (corpus / name).write_text(f"{name!r}: the council approved the budget on Tuesday.\n")
    marker = tmp_path / "pickle-was-executed"
    client = server.client()
    home = queue_for(queue_name, str(model))  # the queue of the worker's model
    body = base64.b64encode(pickle.dumps(((), {"key": Exploit(str(marker))}, {}))).decode()
    envelope = {
        "body": body,
        "content-encoding": "binary",
        "content-type": "application/x-python-serialize",
        "headers": {
            "lang": "py",
            "task": "summarize.chunk",
            "id": "evil",
            "root_id": "evil",
            "retries": 0,
            "timelimit": [None, None],
        },
        "properties": {
            "delivery_tag": "evil-tag",
            "body_encoding": "base64",
            "delivery_info": {"exchange": "", "routing_key": home},
        },
    }
    client.lpush(home, json.dumps(envelope))
    forgeries = [[["a" * 64]], 7, None, "not keys", ["x" * 43], [{"key": 1}]]
    for i, keys in enumerate(forgeries):  # JSON, well formed, with keys no chunk can have
        forged = json.dumps([[], {"keys": keys}, {"callbacks": None, "errbacks": None}])
        client.lpush(home, json.dumps(_json_envelope(forged, home, f"forged-{i}")))

    submitted = cli(env, "submit", str(corpus), "--batch", "outage")
    assert submitted.returncode == 0, submitted.stderr
    worker = Worker(env, tmp_path / "worker.log")
    try:
        wait_for(lambda: count("outage", "succeeded") >= 10, 900, "progress", worker)
        server.restart(down_s=2)  # comes back empty: the queue is gone
        print(f"\nRedis restarted empty with {count('outage', 'succeeded')} of 63 done")
        wait_for(
            lambda: count("outage", "succeeded") >= 30, 600, "progress after the restart", worker
        )
        proxy.cut()
        cut_at = count("outage", "succeeded")
        time.sleep(15)  # longer than the visibility timeout
        proxy.restore()
        print(f"database cut for 15 s at {cut_at} of 63 done")
        wait_for(lambda: count("outage", "succeeded") == 63, 900, "the whole batch", worker)
        worker.signal(signal.SIGTERM)
        assert worker.wait(120) == 0, worker.tail()
        log = worker.log_path.read_text(errors="replace")
        left = server.client().llen(home)
    finally:
        worker.kill()
        server.stop()
        proxy.close()

    final = rows("outage")
    assert len(final) == 63 and {r.status for r in final} == {"succeeded"}
    assert len({r.source_path for r in final}) == 63
    assert not marker.exists()
    assert "Refusing to deserialize untrusted content of type pickle" in log
    # each forged chunk was rejected alone, without requeue, and the one worker lived on
    assert len(re.findall(r"rejected message forged-\d", log)) == len(forgeries)
    assert left == 0  # rejected, not delivered again
    assert "s3cret-pw" not in log
    status = cli(env | {"SUMMARIZE_DATABASE_URL": POSTGRES_URL}, "status", "outage")
    assert "s3cret-pw" not in status.stdout + status.stderr
    print(
        f"outage batch: 63 documents, 63 rows, lost 0, duplicated 0, attempts "
        f"{sorted({r.attempts for r in final})}"
    )
