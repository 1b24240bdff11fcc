"""Helpers the tests share: files written, the CLI run in this process, rows read back, the
queue's messages read, the lee corpus found."""

from __future__ import annotations

import base64
import functools
import json
import os
import re
from concurrent.futures import Future
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa
from click.testing import CliRunner, Result

from core.messages import unpack
from core.tables import results
from summarize.cli import main
from worker.recorder import Recorder

WAIT_S = 10  # for a drain loop's future in the tests


@functools.cache
def lee() -> Path:
    """The 300 news articles beside the checkout (../shared), or where SUMMARIZE_TEST_CORPUS says."""
    candidates = [
        os.environ.get("SUMMARIZE_TEST_CORPUS"),
        Path(__file__).resolve().parents[2] / "shared" / "corpus" / "lee-background",
    ]
    for candidate in filter(None, candidates):
        if len(list(Path(candidate).glob("*.txt"))) >= 300:
            return Path(candidate)
    pytest.fail(
        "The lee-background corpus is not beside the checkout (../shared/corpus/lee-background): "
        "set SUMMARIZE_TEST_CORPUS to its folder."
    )


def write(folder: Path, name: str, content: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def run(env: dict[str, str], *args: str) -> Result:
    """The `summarize` CLI in this process: exceptions propagate instead of becoming exit code 1."""
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def all_rows(db: sa.Engine, batch: str | None = None) -> list[sa.Row]:
    """The rows of `results` (of one batch), in the order they were made."""
    query = sa.select(results).order_by(results.c.id)
    if batch is not None:
        query = query.where(results.c.batch == batch)
    with db.connect() as conn:
        return conn.execute(query).all()


def rows_by_name(db: sa.Engine, batch: str | None = None) -> dict[str, sa.Row]:
    """The rows by the last part of their source path (`a.txt`, `news.jsonl:3`)."""
    return {row.source_path.rsplit("/", 1)[-1]: row for row in all_rows(db, batch)}


def queued_messages(env) -> list[dict]:
    client = redis.Redis.from_url(env["SUMMARIZE_BROKER_URL"])
    raw = client.lrange(env["SUMMARIZE_QUEUE"], 0, -1)
    messages = []
    for item in raw:
        envelope = json.loads(item)
        args, kwargs, _ = json.loads(base64.b64decode(envelope["body"]))
        messages.append(
            {
                "task": envelope["headers"]["task"],
                "args": args,
                "keys": unpack(kwargs["keys"]),
                "content_type": envelope["content-type"],
            }
        )
    return messages


def queued_keys(env) -> list[str]:
    """Every result key the queue's chunk messages carry."""
    return [key for message in queued_messages(env) for key in message["keys"]]


def summary_line(output: str, label: str) -> int:
    match = re.search(rf"^  {label}\s+([\d,]+)", output, re.M)
    assert match, output
    return int(match.group(1).replace(",", ""))


def openai_request(custom_id, text, system=None, **body) -> str:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": text})
    request = {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "gpt-4o-mini", "messages": messages, **body},
    }
    return json.dumps(request) + "\n"


def summarize_one(drain, key: str) -> Future:
    """Hand one document to a drain loop; the future resolves once it has settled."""
    one: Future = Future()
    chunk = drain.summarize_all([key])
    chunk.add_done_callback(lambda done: one.set_result(done.result()[0]))
    return one


class CountingRecorder(Recorder):
    """The real recorder, remembering how many rows each transaction wrote."""

    def __init__(self, engine):
        super().__init__(engine, retry_s=1)
        self.transactions: list[int] = []

    def record(self, outcomes):
        super().record(outcomes)
        self.transactions.append(len(outcomes))


# A secret that signs notices (SUMMARIZE_NOTIFY_SECRET; core/notices.py), for the tests only.
NOTIFY_SECRET = "whsec_" + "c2VjcmV0LWZvci10aGUtbm90aWNlcy10ZXN0cy0xMjM0NQ=="
