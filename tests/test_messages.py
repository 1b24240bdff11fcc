"""The messages `submit` builds by hand are the messages Celery itself would send."""

from __future__ import annotations

import base64
import json

import redis
from celery import Celery

from jobs.messages import task_message


def test_hand_built_messages_match_what_celery_sends(redis_url, queue_name):
    app = Celery(broker=redis_url)
    app.conf.update(task_serializer="json", accept_content=["json"])
    kwargs = {"key": "k1", "document": "d1", "batch": "b"}
    app.send_task("summarize.document", kwargs=kwargs, queue=queue_name)
    client = redis.Redis.from_url(redis_url)
    celerys = json.loads(client.rpop(queue_name))

    ours = json.loads(task_message(queue_name, kwargs))

    assert ours.keys() == celerys.keys()
    assert ours["headers"].keys() == celerys["headers"].keys()
    assert ours["properties"].keys() == celerys["properties"].keys()
    assert ours["properties"]["delivery_info"] == celerys["properties"]["delivery_info"]
    for field in ("content-type", "content-encoding"):
        assert ours[field] == celerys[field]
    assert json.loads(base64.b64decode(ours["body"])) == json.loads(
        base64.b64decode(celerys["body"])
    )
    assert ours["headers"]["task"] == celerys["headers"]["task"] == "summarize.document"
    assert (
        ours["headers"]["id"] == ours["headers"]["root_id"] == ours["properties"]["correlation_id"]
    )
