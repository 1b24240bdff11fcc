"""`summarize serve`: OpenAI's Files and Batch API, driven by the official `openai` client,
unchanged, against a real server process, a real Redis and a real worker (the instant
engine here; the real model in the engine tier)."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import time
from pathlib import Path

import openai
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from core import database, requeue
from core.settings import Settings
from summarize.cli import main
from tests.helpers import NOTIFY_SECRET
from tests.services import Receiver
from tests.stack import SUMMARIZE, Worker, model_dir

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def request(custom_id: str, text: str, **body) -> dict:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "any", "messages": [{"role": "user", "content": text}], **body},
    }


def batch_file(path: Path, *requests: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in requests), encoding="utf-8")
    return path


class Server:
    """`summarize serve --port 0` in its own process."""

    def __init__(self, env: dict[str, str], *args: str):
        self.process = subprocess.Popen(
            [*SUMMARIZE, "serve", "--port", "0", *args],
            env=os.environ | env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        ready, _, _ = select.select([self.process.stdout], [], [], 60)
        line = self.process.stdout.readline() if ready else ""
        match = re.search(r"on (http://127\.0\.0\.1:\d+/v1) \(Ctrl-C stops it\)", line)
        if not match:
            self.stop()
            raise AssertionError(
                f"the server did not start: {line!r} {self.process.stderr.read()!r}"
            )
        self.url = match.group(1)

    def client(self, key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key=key, max_retries=0, timeout=30)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def make_key(env: dict[str, str], name: str) -> str:
    result = CliRunner().invoke(main, ["keys", "create", name], env=env)
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


@pytest.fixture
def instant(env) -> dict[str, str]:
    """The settings of the server and its worker: the instant engine's batches, and a secret
    that signs notices."""
    return env | {"SUMMARIZE_MODEL": "echo", "SUMMARIZE_NOTIFY_SECRET": NOTIFY_SECRET}


@pytest.fixture
def keyed(instant):
    """Two keys, and a server that knows them."""
    alice, bob = make_key(instant, "alice"), make_key(instant, "bob")
    server = Server(instant)
    yield server, alice, bob
    server.stop()


@pytest.fixture
def instant_worker(instant, tmp_path):
    with Worker(instant, tmp_path / "worker.log") as worker:
        worker.wait_ready(120)
        yield worker


def finished(client: openai.OpenAI, batch_id: str, timeout_s: float = 120):
    deadline = time.monotonic() + timeout_s
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        assert time.monotonic() < deadline, f"batch still {batch.status}"
        time.sleep(0.3)


def test_a_script_written_for_openai_runs_unchanged(keyed, instant_worker, tmp_path):
    server, alice, _ = keyed
    client = server.client(alice)
    requests = [
        request("first", "The council closed the bridge for repairs on Monday."),
        request("second", "The library will stay open until ten on weekdays."),
        request("third", "Rain is expected over the weekend in the north."),
    ]

    uploaded = client.files.create(
        file=batch_file(tmp_path / "in.jsonl", *requests).open("rb"), purpose="batch"
    )
    batch = client.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"team": "news"},
    )
    done = finished(client, batch.id)
    output = client.files.content(done.output_file_id).text
    errors = client.files.content(done.error_file_id).text

    assert (uploaded.purpose, uploaded.filename, uploaded.bytes) == (
        "batch",
        "in.jsonl",
        (tmp_path / "in.jsonl").stat().st_size,
    )
    assert batch.status == "validating" and batch.metadata == {"team": "news"}
    assert done.status == "completed"
    assert (
        done.request_counts.total,
        done.request_counts.completed,
        done.request_counts.failed,
    ) == (3, 3, 0)
    assert done.completed_at >= done.in_progress_at >= done.created_at
    assert done.usage.output_tokens > 0
    lines = [json.loads(line) for line in output.splitlines()]
    assert sorted(line["custom_id"] for line in lines) == ["first", "second", "third"]
    by_id = {line["custom_id"]: line["response"] for line in lines}
    assert by_id["first"]["status_code"] == 200
    assert by_id["first"]["body"]["choices"][0]["message"]["content"].startswith("The council")
    assert errors == ""
    assert [b.id for b in client.batches.list()] == [batch.id]
    assert {f.id for f in client.files.list()} == {
        uploaded.id,
        done.output_file_id,
        done.error_file_id,
    }


def test_a_batch_whose_metadata_names_a_url_is_told_there_when_it_ends(
    keyed, instant_worker, tmp_path
):
    server, alice, _ = keyed
    client = server.client(alice)
    receiver = Receiver()
    try:
        uploaded = client.files.create(
            file=batch_file(tmp_path / "in.jsonl", request("a", "A text.")).open("rb"),
            purpose="batch",
        )
        batch = client.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"notify_url": receiver.url},
        )
        assert finished(client, batch.id).status == "completed"
        ((headers, body),) = receiver.wait_for(1)
    finally:
        receiver.close()

    hooks = openai.OpenAI(api_key="unused", webhook_secret=NOTIFY_SECRET).webhooks
    event = hooks.unwrap(body, headers)  # as a script reads OpenAI's own batch webhooks
    assert (event.type, event.data.id) == ("batch.completed", batch.id)


def test_a_key_sees_only_its_own_files_and_batches(keyed, tmp_path):
    server, alice, bob = keyed
    mine, theirs = server.client(alice), server.client(bob)
    uploaded = mine.files.create(
        file=batch_file(tmp_path / "in.jsonl", request("a", "A text.")).open("rb"), purpose="batch"
    )
    batch = mine.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )

    for look in (
        lambda: theirs.files.retrieve(uploaded.id),
        lambda: theirs.files.content(uploaded.id),
        lambda: theirs.files.delete(uploaded.id),
        lambda: theirs.batches.retrieve(batch.id),
        lambda: theirs.batches.cancel(batch.id),
        lambda: theirs.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        ),
    ):
        with pytest.raises(openai.NotFoundError):
            look()
    assert list(theirs.files.list()) == [] and list(theirs.batches.list()) == []
    assert mine.files.retrieve(uploaded.id).id == uploaded.id


def test_calls_without_a_live_key_are_refused(env, keyed, tmp_path):
    server, alice, _ = keyed
    CliRunner().invoke(main, ["keys", "revoke", "alice"], env=env)

    for key in (alice, "sk-summarize-made-up"):
        with pytest.raises(openai.AuthenticationError, match="Incorrect API key"):
            server.client(key).files.list()


def test_a_bad_input_file_is_refused_naming_its_lines(keyed, tmp_path):
    server, alice, _ = keyed
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps(request("a", "A text."))
        + "\n{not json\n"
        + json.dumps(request("a", "Again."))
        + "\n",
        encoding="utf-8",
    )

    with pytest.raises(openai.BadRequestError) as refused:
        server.client(alice).files.create(file=path.open("rb"), purpose="batch")

    message = refused.value.message
    assert "line 2: not JSON" in message and "line 3: custom_id 'a' again" in message
    assert list(server.client(alice).files.list()) == []


@pytest.mark.parametrize(
    ("asked", "param"),
    [
        ({"endpoint": "/v1/embeddings"}, "endpoint"),
        ({"completion_window": "soon"}, "completion_window"),
        ({"metadata": {"k": "v" * 600}}, "metadata"),
        ({"metadata": {"notify_url": "file:///etc/passwd"}}, "metadata"),
    ],
)
def test_a_batch_asked_for_wrongly_is_refused_naming_the_field(keyed, tmp_path, asked, param):
    server, alice, _ = keyed
    client = server.client(alice)
    uploaded = client.files.create(
        file=batch_file(tmp_path / "in.jsonl", request("a", "A text.")).open("rb"), purpose="batch"
    )
    fields = {"endpoint": "/v1/chat/completions", "completion_window": "24h"} | asked

    with pytest.raises(openai.BadRequestError) as refused:
        client.batches.create(input_file_id=uploaded.id, **fields)

    assert refused.value.param == param
    assert list(client.batches.list()) == []


def test_a_cancelled_batch_ends_its_waiting_requests_with_batch_cancelled(keyed, tmp_path):
    server, alice, _ = keyed
    client = server.client(alice)
    uploaded = client.files.create(
        file=batch_file(tmp_path / "in.jsonl", request("a", "A."), request("b", "B.")).open("rb"),
        purpose="batch",
    )
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    while client.batches.retrieve(batch.id).status == "validating":  # no worker runs
        time.sleep(0.1)

    cancelling = client.batches.cancel(batch.id)
    done = client.batches.retrieve(batch.id)
    errors = [
        json.loads(line) for line in client.files.content(done.error_file_id).text.splitlines()
    ]

    assert cancelling.cancelling_at is not None
    assert done.status == "cancelled" and done.cancelled_at is not None
    assert (done.request_counts.total, done.request_counts.failed) == (2, 2)
    assert {(e["custom_id"], e["error"]["code"]) for e in errors} == {
        ("a", "batch_cancelled"),
        ("b", "batch_cancelled"),
    }
    with pytest.raises(openai.BadRequestError, match="cancelled"):
        client.batches.cancel(batch.id)


def test_a_batch_past_its_completion_window_is_expired(env, keyed, tmp_path):
    server, alice, _ = keyed
    client = server.client(alice)
    uploaded = client.files.create(
        file=batch_file(tmp_path / "in.jsonl", request("a", "A.")).open("rb"), purpose="batch"
    )
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="1s"
    )
    while client.batches.retrieve(batch.id).status == "validating":
        time.sleep(0.1)
    time.sleep(1.2)
    db = database.connect(Settings.from_env(env))
    assert requeue.expire_overdue(db) == 1  # what every worker's sweep does
    db.dispose()

    done = client.batches.retrieve(batch.id)

    assert done.status == "expired" and done.expired_at is not None
    assert done.expires_at == done.created_at + 1 or done.expires_at - done.created_at <= 2
    (error,) = [
        json.loads(line) for line in client.files.content(done.error_file_id).text.splitlines()
    ]
    assert error["error"]["code"] == "batch_expired"


def test_a_deleted_file_is_gone(keyed, tmp_path):
    server, alice, _ = keyed
    client = server.client(alice)
    uploaded = client.files.create(
        file=batch_file(tmp_path / "in.jsonl", request("a", "A.")).open("rb"), purpose="batch"
    )

    deleted = client.files.delete(uploaded.id)

    assert deleted.deleted and deleted.id == uploaded.id
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(uploaded.id)


def test_models_are_those_live_workers_serve(keyed, instant_worker):
    server, alice, _ = keyed
    assert [m.id for m in server.client(alice).models.list()] == ["echo"]


def test_the_server_will_not_listen_beyond_loopback_without_a_key(env):
    result = CliRunner().invoke(main, ["serve", "--host", "0.0.0.0", "--port", "0"], env=env)
    assert result.exit_code == 1
    assert "summarize keys create NAME" in result.output


def test_on_loopback_with_no_key_any_key_is_the_local_user(env, tmp_path):
    server = Server(env)
    try:
        client = server.client("anything")
        client.files.create(
            file=batch_file(tmp_path / "in.jsonl", request("a", "A.")).open("rb"), purpose="batch"
        )
        assert len(list(server.client("something else").files.list())) == 1
    finally:
        server.stop()


def test_keys_are_listed_by_name_and_stored_only_as_hashes(env):
    key = make_key(env, "carol")
    listed = CliRunner().invoke(main, ["keys", "list"], env=env)
    db = database.connect(Settings.from_env(env))
    with db.connect() as conn:
        stored = conn.execute(sa.text("SELECT name, key_hash FROM api_keys")).all()
    db.dispose()

    assert key.startswith("sk-summarize-") and len(key) > 40
    assert "carol" in listed.output and "live" in listed.output
    assert stored[0].name == "carol" and key not in stored[0].key_hash


@pytest.mark.engine
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # PG: the instant tests
def test_the_real_model_answers_a_batch_through_the_api(env, tmp_path):
    env = env | {"SUMMARIZE_MODEL": str(model_dir()), "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    server = Server(env)
    try:
        with Worker(env, tmp_path / "worker.log") as worker:
            client = server.client("local")
            text = (
                Path(__file__).parent.parent / "samples" / "library-opening-hours.md"
            ).read_text()
            uploaded = client.files.create(
                file=batch_file(tmp_path / "in.jsonl", request("library", text)).open("rb"),
                purpose="batch",
            )
            batch = client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            worker.wait_ready(600)
            done = finished(client, batch.id, timeout_s=600)
            (line,) = [
                json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()
            ]
    finally:
        server.stop()

    answer = line["response"]["body"]["choices"][0]["message"]["content"]
    assert done.status == "completed" and line["custom_id"] == "library"
    assert "library" in answer.lower() and answer.rstrip().endswith(".")
