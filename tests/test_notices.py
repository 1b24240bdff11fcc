"""A batch that names a URL is told there once it has ended: signed as OpenAI signs its
webhooks, sent once, tried again while the receiver cannot take it."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import openai
import pytest
import sqlalchemy as sa

from core import notices
from core.tables import batches, utcnow
from tests.helpers import NOTIFY_SECRET as SECRET
from tests.services import Receiver
from tests.stack import Worker, cli, copy_lee


@pytest.fixture
def told(env) -> dict[str, str]:
    """The instant engine's settings, with a secret to sign notices."""
    return env | {"SUMMARIZE_MODEL": "echo", "SUMMARIZE_NOTIFY_SECRET": SECRET}


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


def unwrapped(headers: dict[str, str], body: bytes):
    """The event as OpenAI's own client reads a webhook, checking its signature."""
    return openai.OpenAI(api_key="unused", webhook_secret=SECRET).webhooks.unwrap(body, headers)


def batch_row(env: dict[str, str], name: str) -> sa.Row:
    db = sa.create_engine(env["SUMMARIZE_DATABASE_URL"], poolclass=sa.pool.NullPool)
    with db.connect() as conn:
        return conn.execute(sa.select(batches).where(batches.c.name == name)).one()


def test_a_notice_is_signed_as_openais_webhooks_are_and_its_client_verifies_it():
    ending = notices.Ending("nightly", "http://x", "batch.completed", "evt_0123", None)
    body = notices.event(ending)
    headers = notices.headers(SECRET, ending.event_id, body)

    found = unwrapped(headers, body)
    assert (found.type, found.id, found.data.id) == ("batch.completed", "evt_0123", "nightly")
    with pytest.raises(openai.InvalidWebhookSignatureError):
        unwrapped(headers, body.replace(b"nightly", b"nightlz"))
    other = "whsec_" + "b3RoZXItc2VjcmV0LW9mLWFub3RoZXItc2VydmVyLTEyMzQ="
    with pytest.raises(openai.InvalidWebhookSignatureError):
        unwrapped(notices.headers(other, ending.event_id, body), body)


def test_a_batch_is_told_once_when_it_ends_after_its_receiver_failed_once(told, tmp_path):
    receiver = Receiver(500)  # down the first time
    try:
        corpus = copy_lee(tmp_path / "news", 0, 5)
        done = cli(told, "submit", str(corpus), "--batch", "news", "--notify", receiver.url)
        assert done.returncode == 0, done.stderr
        for run in ("first", "second"):  # the second worker has nothing more to say
            with Worker(told, tmp_path / f"{run}.log", "--burst") as worker:
                assert worker.wait(120) == 0, worker.tail()
        received = receiver.wait_for(2)
    finally:
        receiver.close()

    assert len(received) == 2  # the 500, then the one taken: nothing after
    (first, _), (headers, body) = received
    assert first["webhook-id"] == headers["webhook-id"]  # the same event, tried again
    event = unwrapped(headers, body)
    assert (event.type, event.data.id, event.object) == ("batch.completed", "news", "event")
    assert batch_row(told, "news").notice == "delivered: HTTP 200 after 2 attempts"


def test_a_cancelled_batch_and_an_expired_one_are_told_so(told, tmp_path, receiver):
    corpus = copy_lee(tmp_path / "news", 0, 3)
    for name, extra in (("stopped", []), ("late", ["--expire-after", "1s"])):
        done = cli(told, "submit", str(corpus), "--batch", name, "--notify", receiver.url, *extra)
        assert done.returncode == 0, done.stderr
    assert cli(told, "cancel", "stopped").returncode == 0
    time.sleep(1.5)  # `late` expires before any worker takes it
    with Worker(told, tmp_path / "worker.log", "--burst") as worker:
        assert worker.wait(120) == 0, worker.tail()

    events = {e.data.id: e.type for e in (unwrapped(h, b) for h, b in receiver.wait_for(2))}
    assert events == {"stopped": "batch.cancelled", "late": "batch.expired"}


def test_notify_is_refused_without_a_secret_or_with_a_url_that_is_not_http(env, tmp_path):
    corpus = copy_lee(tmp_path / "news", 0, 1)
    unsigned = cli(env, "submit", str(corpus), "--notify", "https://hooks.example.com/x")
    assert unsigned.returncode != 0
    assert "SUMMARIZE_NOTIFY_SECRET is not set" in unsigned.stderr
    assert "summarize keys secret" in unsigned.stderr
    elsewhere = cli(
        env | {"SUMMARIZE_NOTIFY_SECRET": SECRET}, "submit", str(corpus), "--notify", "file:///etc"
    )
    assert elsewhere.returncode == 2 and "must be an http:// or https:// URL" in elsewhere.stderr
    assert cli(env, "status").stdout.count("\n") <= 1  # nothing was submitted
    secret = cli(env, "keys", "secret").stdout.strip()
    assert cli(env | {"SUMMARIZE_NOTIFY_SECRET": secret}, "status").returncode == 0  # valid


def test_one_process_claims_a_notice_and_a_lapsed_claim_is_taken_again_as_the_same_event(db):
    with db.begin() as conn:
        conn.execute(
            batches.insert().values(
                name="b", model="m", instruction="i", max_tokens=8, prompt_hash="0" * 16
            )
        )
    assert notices.ended(db) == []  # no URL: nothing to tell
    notices.watch(db, "b", "http://127.0.0.1:9/x")
    (ending,) = notices.ended(db)
    assert notices.claim(db, ending) and not notices.claim(db, ending)
    assert notices.ended(db) == []  # claimed, and its sender is still trying

    later = utcnow() + timedelta(seconds=notices.CLAIM_LAPSE_S + 1)
    (again,) = notices.ended(db, later)  # the sender died without saying
    assert again.event_id == ending.event_id and again.claimed is not None
    assert notices.claim(db, again) and not notices.claim(db, again)


def test_a_receiver_that_refuses_is_not_tried_again_and_one_that_is_away_is(receiver):
    ending = notices.Ending("b", receiver.url, "batch.completed", "evt_1", None)
    refusing = Receiver(400)
    try:
        assert (
            notices.deliver(refusing.url, SECRET, ending) == "refused: HTTP 400 (not tried again)"
        )
        assert len(refusing.received) == 1
    finally:
        refusing.close()
    away = notices.deliver("http://127.0.0.1:9/hooks", SECRET, ending, wait_s=0.01)
    assert away.startswith(f"undelivered after {notices.ATTEMPTS} attempts: ")
    assert notices.deliver(receiver.url, SECRET, ending) == "delivered: HTTP 200 after 1 attempt"
    (headers, body) = receiver.received[0]
    assert json.loads(body)["data"] == {"id": "b"} and headers["webhook-id"] == "evt_1"
