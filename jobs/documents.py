"""What reading a corpus makes of each file or record: a document to summarize (`Text`),
or one that cannot be used, and why (`Unreadable`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

NESTED = "nested too deeply to read (JSON arrays or objects inside each other a thousand deep)"


@dataclass(frozen=True)
class Text:
    """A document read successfully. A record (jobs/records.py) also has its id, its other
    fields, and, from an OpenAI Batch request, its own instruction and summary length."""

    path: str
    body: str
    content_hash: str
    size_bytes: int
    doc_id: str | None = None  # None: the path
    metadata: str | None = None  # a JSON object
    instruction: str | None = None  # None: the batch's
    max_tokens: int | None = None
    file: str | None = None  # a record's file (its path is FILE:LINE)

    @property
    def weight(self) -> int:
        """About the bytes it holds until its chunk is written: the text, and a record's id,
        metadata and instruction (which may be as large)."""
        extra = (self.doc_id, self.metadata, self.instruction)
        return self.size_bytes + sum(len(part) for part in extra if part)


@dataclass(frozen=True)
class Unreadable:
    """A text or Markdown file that cannot become a document, and why, in words a user can act on."""

    path: str
    reason: str
    doc_id: str | None = None  # a record's id, when it had one


def record_text(
    where: str,
    text,
    number: int,
    max_bytes: int,
    field: str,
    *,
    doc_id,
    metadata=None,
    instruction=None,
    max_tokens=None,
    unit: str = "line",
) -> Text | Unreadable:
    """A record's document (its path `where` is FILE:NUMBER), or why it cannot be one; a record
    is a `unit` (a line, a row) of its file."""
    if not isinstance(text, str):
        return Unreadable(
            where, f"{unit} {number}: {field} is {type(text).__name__}, not text", doc_id=doc_id
        )
    text = text.replace("\r\n", "\n")
    if not text.strip():
        return Unreadable(
            where, f"{unit} {number}: empty text: nothing to summarize", doc_id=doc_id
        )
    if "\x00" in text:
        return Unreadable(where, f"{unit} {number}: the text holds NUL characters", doc_id=doc_id)
    try:
        encoded = text.encode("utf-8")
        meta = _json(metadata) if metadata else None
        (doc_id or "").encode("utf-8")
        (instruction or "").encode("utf-8")
    except UnicodeEncodeError:
        return Unreadable(
            where,
            f"{unit} {number}: holds a lone surrogate (\\ud8..), which is not text: fix the record",
            doc_id=None,
        )
    except RecursionError:
        return Unreadable(where, f"{unit} {number}: {NESTED}", doc_id=doc_id)
    if len(encoded) > max_bytes:
        return Unreadable(
            where,
            f"{unit} {number}: text larger than SUMMARIZE_MAX_DOC_BYTES "
            f"({len(encoded):,} bytes > {max_bytes:,})",
            doc_id=doc_id,
        )
    return Text(
        where,
        text,
        hashlib.sha256(encoded).hexdigest(),
        len(encoded),
        doc_id=doc_id,
        metadata=meta,
        instruction=instruction,
        max_tokens=max_tokens,
        file=where.rsplit(":", 1)[0],
    )


def _json(value: dict) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_plain)
    text.encode("utf-8")  # a lone surrogate raises here
    return text


def _plain(value: object) -> str:
    """A value JSON has no type for: a date or time as its ISO text, anything else as text."""
    return value.isoformat() if hasattr(value, "isoformat") else str(value)
