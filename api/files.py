"""The API's files: batch input files uploaded, and the output and error files of batches.

An upload is written to the data folder's `files/` as it arrives, never held whole, and is
refused past SUMMARIZE_API_MAX_FILE_MB. A batch input file is read line by line as `submit`
reads an OpenAI Batch input file (jobs/records.py) before it is kept: a file with a line
`submit` could not use, or a `custom_id` twice, is refused with the lines named, as OpenAI
refuses a file it cannot run.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import sqlalchemy as sa

from core.settings import Settings
from core.tables import stored_files, utcnow
from jobs import records
from jobs.documents import Unreadable
from jobs.fields import DEFAULT_CHOICE
from jobs.folders import Found

BLOCK_BYTES = 1 << 20
ERRORS_SHOWN = 10  # bad lines named in a refusal
PURPOSES = ("batch",)  # what may be uploaded; a batch's own files are `batch_output`


class Refused(Exception):
    """A request the API refuses, as OpenAI would: HTTP status, message, param and code."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def folder(settings: Settings) -> Path:
    path = settings.data_dir / "files"
    path.mkdir(parents=True, exist_ok=True)
    return path


def path_of(settings: Settings, file_id: str) -> Path:
    return folder(settings) / f"{file_id}.jsonl"


def new_id(prefix: str = "file-") -> str:
    return prefix + secrets.token_hex(12)


def as_object(row) -> dict:
    """A file as OpenAI's API returns it."""
    return {
        "id": row.id,
        "object": "file",
        "bytes": row.bytes,
        "created_at": int(row.created_at.timestamp()),
        "filename": row.filename,
        "purpose": row.purpose,
        "status": "processed",
        "status_details": None,
        "expires_at": None,
    }


@dataclass
class Upload:
    """An upload being written: its temporary path, and its bytes so far."""

    path: Path
    limit: int
    size: int = 0

    def write(self, out, block: bytes) -> None:
        self.size += len(block)
        if self.size > self.limit:
            raise too_large(self.limit >> 20)
        out.write(block)


def too_large(limit_mb: int) -> Refused:
    """The refusal of a file over SUMMARIZE_API_MAX_FILE_MB."""
    return Refused(
        400,
        f"The file is larger than this server takes ({limit_mb} MB): split it, "
        "or raise SUMMARIZE_API_MAX_FILE_MB where the server runs.",
        "file",
        "file_too_large",
    )


def store(
    settings: Settings, db: sa.Engine, owner: str, filename: str, blocks: Iterator[bytes]
) -> dict:
    """Write an uploaded batch input file, check it, and keep it; its file object."""
    file_id = new_id()
    final = path_of(settings, file_id)
    upload = Upload(final.with_suffix(".part"), settings.api_max_file_mb << 20)
    try:
        with upload.path.open("wb") as out:
            for block in blocks:
                upload.write(out, block)
        problems = check(settings, upload.path)
        if problems:
            raise Refused(400, problems, "file", "invalid_file")
        os.replace(upload.path, final)
    finally:
        upload.path.unlink(missing_ok=True)
    row = {
        "id": file_id,
        "owner": owner,
        "filename": filename[:1000] or "upload",
        "purpose": "batch",
        "bytes": upload.size,
        "created_at": utcnow(),
    }
    with db.begin() as conn:
        conn.execute(stored_files.insert().values(**row))
    return as_object(SimpleNamespace(**row))


def check(settings: Settings, path: Path) -> str | None:
    """What makes a batch input file unusable, in a sentence naming its lines; None if none."""
    first = _first_record(path)
    if first is None:
        return "The file holds no request: a batch input file has one JSON request a line."
    if not isinstance(first, dict) or "custom_id" not in first or "body" not in first:
        return (
            "This is not a batch input file: each line must be a request "
            '{"custom_id": …, "method": "POST", "url": "/v1/chat/completions", "body": {…}}.'
        )
    bad, seen = [], set()
    fields = DEFAULT_CHOICE.of(str(path))
    for item in records.read(Found(str(path), "document"), settings.max_doc_bytes, fields):
        if isinstance(item, Unreadable):
            bad.append(item.reason)
        elif item.doc_id in seen:
            line = item.path.rpartition(":")[2]
            bad.append(f"line {line}: custom_id {item.doc_id!r} again (each must be unique)")
        else:
            seen.add(item.doc_id)
        if len(bad) >= ERRORS_SHOWN:
            break
    if not bad:
        return None
    return f"{len(bad)} line(s) cannot be used: " + "; ".join(bad)


def _first_record(path: Path) -> object | None:
    with path.open("rb") as handle:
        for line in handle:
            if line.strip():
                try:
                    return json.loads(line)
                except ValueError:
                    return "not JSON"
    return None


def delete(settings: Settings, db: sa.Engine, owner: str, file_id: str) -> None:
    """Remove one of the owner's files: its row, then its bytes."""
    with db.begin() as conn:
        done = conn.execute(
            stored_files.delete().where(stored_files.c.id == file_id, stored_files.c.owner == owner)
        )
    if not done.rowcount:
        raise Refused(404, f"No such File object: {file_id}", "file_id", "not_found")
    path_of(settings, file_id).unlink(missing_ok=True)
