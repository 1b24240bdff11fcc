"""A batch's rows out: `summarize results` as JSON lines or CSV.

Rows stream from a server-side cursor in pages, so exporting a million rows
costs no more memory than exporting a hundred.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import sys
import tempfile
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TextIO

import sqlalchemy as sa

from core.errors import StorageUnavailable, described
from core.storage import STORAGE_LIBRARIES, filesystem, is_url
from core.tables import Status, batches, prompts, results
from readers.views import as_utc

PAGE_ROWS = 1000
EXPORTED = [c.name for c in results.columns]


def exists(db: sa.Engine, batch: str) -> bool:
    with db.connect() as conn:
        return (
            conn.execute(sa.select(batches.c.name).where(batches.c.name == batch)).first()
            is not None
        )


def rows(
    db: sa.Engine, batch: str | None = None, status: str | tuple[str, ...] | None = None
) -> Iterator[dict]:
    """Every matching row of `results` (of one status, or of any of several), in id order,
    fetched a page at a time."""
    query = sa.select(results).order_by(results.c.id)
    if batch is not None:
        query = query.where(results.c.batch == batch)
    if isinstance(status, str):
        query = query.where(results.c.status == status)
    elif status is not None:
        query = query.where(results.c.status.in_(status))
    with db.connect() as conn:
        streamed = conn.execution_options(stream_results=True, yield_per=PAGE_ROWS)
        for row in streamed.execute(query):
            yield dict(row._mapping)


def structured(db: sa.Engine) -> frozenset[str]:
    """The prompt hashes whose summaries are JSON of a schema (submit --schema)."""
    with db.connect() as conn:
        query = sa.select(prompts.c.prompt_hash).where(prompts.c.schema.is_not(None))
        return frozenset(conn.execute(query).scalars())


def write(rows_: Iterator[dict], out: TextIO, fmt: str, json_prompts=frozenset()) -> int:
    """Write rows as JSON lines, CSV (with a header) or OpenAI Batch output lines; returns
    how many. In JSON lines a row's `metadata` is an object, and so is its summary when its
    prompt had a schema (`json_prompts`) and it parses; in CSV both are JSON text."""
    count = 0
    if fmt == "openai":
        for row in rows_:
            out.write(json.dumps(openai_line(row), ensure_ascii=False))
            out.write("\n")
            count += 1
    elif fmt == "csv":
        writer = csv.DictWriter(
            out, fieldnames=EXPORTED, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC
        )
        writer.writeheader()
        for row in rows_:
            writer.writerow({k: _cell(_plain(v)) for k, v in row.items()})
            count += 1
    else:
        for row in rows_:
            row = {k: _plain(v) for k, v in row.items()} | {"metadata": _object(row["metadata"])}
            if row["prompt_hash"] in json_prompts:
                row["summary"] = _parsed(row["summary"])
            out.write(json.dumps(row, ensure_ascii=False))
            out.write("\n")
            count += 1
    return count


# What each kind of row is in an OpenAI Batch file (https://platform.openai.com/docs/guides/batch):
# a failure is the HTTP response the request would have had, a cancelled or expired row a
# batch-level error.
UNREAD = (400, "invalid_request_error")  # failed before it was read: the input was the problem
FAILED = (500, "server_error")  # failed in the worker
CANCELLED_ERROR = "batch_cancelled"
EXPIRED_ERROR = "batch_expired"  # ended by the batch's --expire-after (core/requeue.py)
ENDED = {Status.CANCELLED: CANCELLED_ERROR, Status.EXPIRED: EXPIRED_ERROR}


def openai_line(row: dict) -> dict:
    """One row as a line of an OpenAI Batch output file (succeeded) or error file (failed,
    cancelled, expired): `id`, `custom_id` (the row's doc_id), `response` and `error`."""
    line = {"id": f"batch_req_{row['id']}", "custom_id": row["doc_id"] or row["source_path"]}
    request_id = f"summarize-{row['id']}"
    if row["status"] in ENDED:
        error = {"code": ENDED[row["status"]], "message": row["error"] or row["status"]}
        return line | {"response": None, "error": error}
    if row["status"] != Status.SUCCEEDED:
        status_code, kind = UNREAD if row["content_hash"] is None else FAILED
        error = {
            "message": row["error"] or row["status"],
            "type": kind,
            "param": None,
            "code": None,
        }
        response = {"status_code": status_code, "request_id": request_id, "body": {"error": error}}
        return line | {"response": response, "error": None}
    prompt, completion = row["prompt_tokens"] or 0, row["completion_tokens"] or 0
    finished = row["finished_at"] or row["created_at"]
    body = {
        "id": f"chatcmpl-{(row['result_key'] or '')[:24]}{row['id']}",
        "object": "chat.completion",
        "created": int(finished.timestamp()),
        "model": row["model"],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": row["summary"]},
                "logprobs": None,
                "finish_reason": row["finish_reason"] or "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
    response = {"status_code": 200, "request_id": request_id, "body": body}
    return line | {"response": response, "error": None}


def _parsed(summary: str | None):
    """A summary generated under a schema, as the JSON it is (as text if it was cut short)."""
    try:
        return json.loads(summary) if summary else summary
    except ValueError:
        return summary


def _object(metadata: str | None):
    return json.loads(metadata) if metadata else None


# A formula's first character, at the cell's start, after white space, or after a character
# a spreadsheet may split cells at (`;` and `,` in many locales, tab): =1+1, " =1+1", "x;=1+1"
_FORMULA = re.compile(r"(?:^|[;,\t])\s*[=+\-@]|^[\t\r]")


def _cell(value):
    """A CSV cell a spreadsheet will not run: text holding the start of a formula gets a
    leading `'` (OWASP's advice on CSV injection), and every text cell is quoted."""
    if isinstance(value, str) and _FORMULA.search(value):
        return "'" + value
    return value


def _plain(value):
    """Datetimes as ISO 8601 in UTC with its offset (`…+00:00`, as `status --json` and the
    dashboard give them); the csv module writes None as an empty field by itself."""
    return as_utc(value).isoformat() if isinstance(value, datetime) else value


@contextlib.contextmanager
def destination(output: str | None, binary: bool, storage_options: dict | None = None):
    """Standard output, or `output` (a path or a URL) written whole or not at all: a
    temporary file or object beside it, renamed or moved to it once complete."""
    if output is None:
        yield sys.stdout.buffer if binary else sys.stdout
        sys.stdout.flush()
        return
    if is_url(output):
        with _to_url(output, binary, storage_options or {}) as handle:
            yield handle
        return
    target = Path(output)
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - renamed once closed, below
        "wb" if binary else "w",
        dir=target.resolve().parent,
        prefix=f".{target.name}.",
        delete=False,
        **({} if binary else {"encoding": "utf-8", "newline": ""}),
    )
    try:
        with handle:
            yield handle
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(handle.name, 0o666 & ~umask)  # as a shell's `>` would make it
        os.replace(handle.name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(handle.name)
        raise


@contextlib.contextmanager
def _to_url(url: str, binary: bool, storage_options: dict):
    """An object written under a temporary name beside `url`, then moved to it: readers of
    `url` never see half an export."""
    fs, key = filesystem(url, storage_options)
    folder, _, name = key.rstrip("/").rpartition("/")
    temporary = f"{folder}/.{name}.{uuid.uuid4().hex}.partial"
    try:
        with fs.open(temporary, "wb") as raw:
            if binary:
                yield raw
            else:
                text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
                yield text
                text.flush()
                text.detach()  # the object is closed by its own `with`
        fs.mv(temporary, key)
    except BaseException as exc:
        with contextlib.suppress(Exception):
            fs.rm(temporary)
        if isinstance(exc, Exception) and _from_storage(exc):
            raise StorageUnavailable(
                f"Could not write {url} ({described(exc)}): nothing was written there; check "
                "the bucket, the credentials and SUMMARIZE_STORAGE_OPTIONS."
            ) from None
        raise


def _from_storage(exc: Exception) -> bool:
    """An error of the storage library or the network, not of the export itself."""
    return isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in STORAGE_LIBRARIES
