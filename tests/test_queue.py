"""The queue: documents travel in chunks of keys, in messages Celery itself makes and reads."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
import redis
from celery import Celery

from core import messages, producer, redis_state, transport
from core.settings import PRIORITY_NAMES, Settings
from worker.tasks import summarize_chunk


def keys(n: int) -> list[str]:
    return [hashlib.sha256(str(i).encode()).hexdigest() for i in range(n)]


def test_keys_pack_into_43_characters_each_and_come_back_unchanged():
    some = keys(5)

    packed = messages.pack(some)

    assert len(packed) == 5 * messages.KEY_CHARS
    assert messages.unpack(packed) == some


@pytest.mark.parametrize(
    "forged",
    [None, 7, ["a" * 64], "", "x" * 42, "!" * 43, "A" * 44, {"key": "k"}, "é" * 43],
)
def test_anything_but_a_chunk_of_keys_is_a_bad_message(forged):
    with pytest.raises(messages.BadMessage):
        messages.unpack(forged)


def test_a_chunk_is_split_at_chunk_docs_and_celery_reads_each_message(env, redis_url, queue_name):
    settings = Settings.from_env(env | {"SUMMARIZE_CHUNK_DOCS": "4"})
    wanted = keys(10)

    assert producer.enqueue(settings, wanted) == 3

    app = Celery(broker=redis_url, set_as_current=False)
    app.conf.update(transport.celery_config(settings))
    carried = []
    with app.connection_for_read() as connection:
        simple = connection.SimpleQueue(queue_name)
        for _ in range(3):
            message = simple.get(timeout=5)
            assert message.headers["task"] == "summarize.chunk"
            assert message.content_type == "application/json"
            args, kwargs, _ = message.decode()
            carried.append(messages.unpack(kwargs["keys"]))
            message.ack()
        simple.close()
    assert [len(c) for c in carried] == [4, 4, 2]
    assert sorted(k for c in carried for k in c) == sorted(wanted)


@pytest.mark.parametrize("priority", PRIORITY_NAMES)
def test_a_message_says_how_urgent_it_is_by_the_list_it_came_from(
    env, redis_url, queue_name, priority
):
    producer.enqueue(Settings.from_env(env), keys(1), priority=priority)

    app = Celery(broker=redis_url, set_as_current=False)
    with app.connection_for_read() as connection:
        simple = connection.SimpleQueue(messages.at(queue_name, priority))
        message = simple.get(timeout=5)
        message.ack()
        simple.close()
    urgency = messages.urgency(message.delivery_info["routing_key"], queue_name)
    assert urgency == PRIORITY_NAMES.index(priority)  # 0 the most urgent


def test_a_queue_named_like_a_priority_list_is_still_read_as_normal():
    """SUMMARIZE_QUEUE=jobs.low: its own list is `normal`, `jobs.low.low` its low one."""
    home = "jobs.low"

    assert messages.urgency(home, home) == PRIORITY_NAMES.index("normal")
    assert messages.urgency(messages.at(home, "low"), home) == PRIORITY_NAMES.index("low")
    assert messages.urgency(messages.at(home, "high"), home) == PRIORITY_NAMES.index("high")
    assert messages.urgency("other.high", home) == PRIORITY_NAMES.index("normal")
    assert messages.urgency(None, home) == PRIORITY_NAMES.index("normal")


def test_the_keys_in_redis_are_those_waiting_and_those_held(env, settings, redis_url):
    client = redis.Redis.from_url(redis_url)
    producer.enqueue(settings, keys(3))
    held = client.rpop(settings.queue)  # as kombu does when a worker takes a message
    client.hset(transport.UNACKED, "tag-1", b"[" + held + b', "", "q"]')
    producer.enqueue(settings, keys(5)[3:])

    present = redis_state.keys_in_redis(client, settings.queue, page=1)
    assert len(present) == 5
    assert all(key in present for key in keys(5))
    assert not any(key in present for key in keys(8)[5:])
    assert redis_state.messages_in_redis(client, settings.queue) == 2


def test_a_queued_document_costs_redis_under_100_bytes(env, redis_url):
    settings = Settings.from_env(env)
    client = redis.Redis.from_url(redis_url)
    wanted = keys(20_000)
    before = client.info("memory")["used_memory"]

    producer.enqueue(settings, wanted)

    per_document = (client.info("memory")["used_memory"] - before) / len(wanted)
    print(f"\nRedis memory per queued document: {per_document:.0f} bytes")
    assert per_document <= 100


@pytest.mark.parametrize("forged", [["a" * 64], 7, None, "not keys"])
def test_a_forged_chunk_is_rejected_alone_and_never_reaches_the_drain_loop(forged):
    assert summarize_chunk(keys=forged) == {"rejected": 1}


def test_celery_dash_a_refuses_to_start_a_worker_without_leases_and_says_what_to_run(env):
    started = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "worker.app", "worker", "--pool", "threads"],
        env=os.environ | env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert started.returncode != 0
    assert "Start the worker with `summarize worker`" in started.stdout + started.stderr
