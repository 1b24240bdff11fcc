"""Record files: each JSON line or CSV row is a document, with its id and other fields.

A record's text is in one field (`--text-field`, default `text`) and its id in
another (`--id-field`, default `id`); every other field is kept as the document's
metadata. A JSON lines file whose first record has `custom_id` and `body` is an
OpenAI Batch input file: `custom_id` is the id, the last user message the text,
the system messages the instruction, `max_tokens`/`max_completion_tokens` the
summary length.

Records stream: a file of a million records is read a line at a time, and no line
is read past SUMMARIZE_MAX_DOC_BYTES. A record that cannot be used is an
`Unreadable` naming its line and why; the rest of the file goes on. Each record's
source path is `FILE:LINE`, so submitting the file again finds the same rows.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator

from core.errors import described
from core.settings import MAX_SUMMARY_TOKENS
from jobs.documents import NESTED, Text, Unreadable, record_text
from jobs.fields import Fields
from jobs.folders import Found

CHAT_URL = "/v1/chat/completions"
SAMPLED_BYTES = 4 << 20  # of a large object, read to estimate its records


def read(found: Found, max_bytes: int, fields: Fields):
    """Every record of a `.jsonl` or `.csv` file, as a Text or an Unreadable, in file order."""
    path = found.path
    handle = found.open()
    if isinstance(handle, Unreadable):
        yield handle
        return
    with handle:
        if path.lower().endswith(".csv"):
            yield from _csv(handle, path, max_bytes, fields)
        else:
            yield from _jsonl(handle, path, max_bytes, fields)


def estimate(found: Found) -> int:
    """How many records a file holds, about: its lines (less a CSV's header), counted in
    blocks without parsing; 1 when it cannot be opened (its failure is one row). Of an object
    larger than SAMPLED_BYTES, its first SAMPLED_BYTES' lines in proportion: it is not
    downloaded twice."""
    handle = found.open()
    if isinstance(handle, Unreadable):
        return 1
    lines, last, read = 0, b"\n", 0
    sampled = found.size is not None and found.size > SAMPLED_BYTES
    with handle:
        while block := handle.read(SAMPLED_BYTES if sampled else 1 << 20):
            lines += block.count(b"\n")
            last, read = block[-1:], read + len(block)
            if sampled:
                return max(1, lines * found.size // read)
    lines += last != b"\n"  # a last line without its newline
    return max(1, lines - found.path.lower().endswith(".csv"))


def _jsonl(handle, path: str, max_bytes: int, fields: Fields) -> Iterator[Text | Unreadable]:
    openai = None  # decided by the first record
    number = 0
    while True:
        line = handle.readline(max_bytes + 1)
        if not line:
            return
        number += 1
        where = f"{path}:{number}"
        too_long = _over_the_limit(handle, line, max_bytes)
        if too_long:
            yield Unreadable(where, f"line {number}: {too_long}")
            continue
        if not line.strip():
            continue
        try:
            record = _parsed(line)
            if openai is None and isinstance(record, dict):
                openai = "custom_id" in record and "body" in record
            if isinstance(record, str):
                yield Unreadable(where, f"line {number}: {record}")
            elif openai:
                yield _request(record, where, number, max_bytes)
            else:
                yield _record(record, where, number, max_bytes, fields)
        except Exception as exc:  # noqa: BLE001 - one record must never stop the file
            yield Unreadable(where, f"line {number}: cannot be read ({described(exc)})")


def _parsed(line: bytes) -> dict | str:
    """A line's JSON object, or what is wrong with the line."""
    try:
        record = json.loads(line)
    except UnicodeDecodeError as exc:
        return f"not valid UTF-8 (byte offset {exc.start})"
    except json.JSONDecodeError as exc:
        return f"not JSON ({exc.msg}, column {exc.colno})"
    except RecursionError:
        return NESTED
    if not isinstance(record, dict):
        return "not a JSON object"
    return record


def _csv(handle, path: str, max_bytes: int, fields: Fields) -> Iterator[Text | Unreadable]:
    lines = _Lines(handle, max_bytes)
    csv.field_size_limit(max(csv.field_size_limit(), max_bytes))
    rows = csv.DictReader(lines)
    try:
        header = rows.fieldnames
    except (csv.Error, _RecordTooLarge) as exc:
        yield Unreadable(path, f"the CSV header cannot be read ({exc})")
        return
    if not header:
        yield Unreadable(path, "empty CSV file: nothing to summarize")
        return
    named = fields.chosen(header)
    if named is None:
        yield Unreadable(
            path,
            f"no column {fields.texts} (columns: {', '.join(map(repr, header))}): name the "
            "column that holds the text with --text-field (FILE=NAME for this file alone)",
        )
        return
    fields = named
    while True:
        lines.new_record()
        try:
            row = next(rows)
        except StopIteration:
            yield from lines.unreported(path, lines.number + 1)
            return
        except csv.Error as exc:
            first = lines.first or lines.number
            yield from lines.unreported(path, first)
            yield Unreadable(f"{path}:{first}", f"line {first}: not a CSV record ({exc})")
            continue
        except _RecordTooLarge as exc:  # read past, to its end: the next record starts afresh
            first = lines.first or lines.number
            yield from lines.unreported(path, first)
            yield Unreadable(f"{path}:{first}", f"line {first}: {exc}")
            continue
        first = lines.first or lines.number
        yield from lines.unreported(path, first)  # lines csv skipped as blank
        problem = lines.take(first, lines.number)
        if problem:
            yield Unreadable(f"{path}:{first}", f"line {first}: {problem}")
            continue
        if None in row:  # more cells than the header has columns
            row["_extra"] = row.pop(None)
        yield _record(row, f"{path}:{first}", first, max_bytes, fields)


def _over_the_limit(handle, line: bytes, limit: int) -> str | None:
    """For a line read with readline(limit + 1) that was cut before its end: the rest of it
    read and let go, and what is wrong with it; None for a whole line."""
    if len(line) <= limit or line.endswith(b"\n"):
        return None
    while (rest := handle.readline(1 << 20)) and not rest.endswith(b"\n"):
        pass
    return f"longer than SUMMARIZE_MAX_DOC_BYTES ({limit:,} bytes): shorten the record or raise the limit"


class _RecordTooLarge(ValueError):
    """A CSV record (its cells over several lines) ran on past the size limit."""


class _Lines:
    """A binary file's lines as text for the csv module, none read past the size limit; a
    line too long or not UTF-8 is noted by number (and given to csv blank or repaired).

    It also follows each record: its first line names it, whatever its cells' quoting, and
    one whose lines add up to more than the limit is read to its end (where its quotes
    pair up) without being kept, and refused."""

    def __init__(self, handle, limit: int):
        self.handle, self.limit = handle, limit
        self.number = 0
        self.problems: dict[int, str] = {}
        self.new_record()

    def new_record(self) -> None:
        self.first: int | None = None  # the record's first line that is not blank
        self.record_bytes = 0
        self.quotes = 0  # odd: inside a quoted cell

    def __iter__(self):
        return self

    def __next__(self) -> str:
        raw = self.handle.readline(self.limit + 1)
        if not raw:
            raise StopIteration
        self.number += 1
        if self.number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]  # a byte order mark, as Excel writes
        too_long = _over_the_limit(self.handle, raw, self.limit)
        if too_long:
            self.problems[self.number] = too_long
            return "\n"
        self.record_bytes += len(raw)
        self.quotes += raw.count(b'"')
        if self.record_bytes > self.limit and self.first is not None:
            self._skip_record()
            raise _RecordTooLarge(
                f"a record of more than SUMMARIZE_MAX_DOC_BYTES ({self.limit:,} bytes), through "
                f"line {self.number}: shorten it or raise the limit (a quote that never closes "
                "makes the rest of the file one record)"
            )
        if self.first is None and raw.strip(b"\r\n"):
            self.first = self.number
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.problems[self.number] = (
                f"not valid UTF-8 (byte 0x{raw[exc.start]:02x}): save the file as UTF-8"
            )
            return raw.decode("utf-8", "replace")

    def _skip_record(self) -> None:
        """Read on to the line where the record's quotes pair up, keeping nothing."""
        while self.quotes % 2:
            piece = self.handle.readline(1 << 20)
            if not piece:
                return
            self.number += piece.endswith(b"\n")
            self.quotes += piece.count(b'"')

    def take(self, first: int, last: int) -> str | None:
        """The first problem of lines first..last, forgetting theirs."""
        found = [self.problems.pop(n) for n in sorted(self.problems) if first <= n <= last]
        return found[0] if found else None

    def unreported(self, path: str, before: int) -> Iterator[Unreadable]:
        """Failures for problem lines before `before` that made no record (skipped as blank)."""
        for n in sorted(self.problems):
            if n < before:
                yield Unreadable(f"{path}:{n}", f"line {n}: {self.problems.pop(n)}")


def _record(record: dict, where: str, number: int, max_bytes: int, fields: Fields):
    named = fields.chosen(record)
    if named is None:
        names = ", ".join(map(repr, list(record)[:10]))
        return Unreadable(
            where,
            f"line {number}: no {fields.texts} field (fields: {names}): "
            "name the field that holds the text with --text-field",
        )
    (text,), (id_field,) = named.text, named.id
    doc_id = record.get(id_field)
    if doc_id is not None and not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool):
        return Unreadable(
            where, f"line {number}: the id field {id_field!r} is not a string or a number"
        )
    rest = {k: v for k, v in record.items() if k not in (text, id_field)}
    return record_text(
        where,
        record[text],
        number,
        max_bytes,
        text,
        doc_id=str(doc_id) if doc_id not in (None, "") else None,
        metadata=rest or None,
    )


def _request(record: dict, where: str, number: int, max_bytes: int):
    """One line of an OpenAI Batch input file."""
    custom_id = record.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return Unreadable(where, f"line {number}: no custom_id (a non-empty string)")
    url = record.get("url", CHAT_URL)
    if url != CHAT_URL:
        return Unreadable(
            where,
            f"line {number}: url {str(url)[:80]!r}: only {CHAT_URL} requests can be summarized",
            doc_id=custom_id,
        )
    body = record.get("body")
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return Unreadable(where, f"line {number}: no body.messages list", doc_id=custom_id)
    users = [m for m in messages if m.get("role") == "user"]
    if not users:
        return Unreadable(where, f"line {number}: no user message to summarize", doc_id=custom_id)
    text = _content(users[-1].get("content"))
    system = [
        _content(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
    ]
    if text is None or None in system:
        return Unreadable(
            where,
            f"line {number}: a message's content is neither text nor a list of text parts",
            doc_id=custom_id,
        )
    length = body.get("max_completion_tokens", body.get("max_tokens"))
    if length is not None and (
        not isinstance(length, int)
        or isinstance(length, bool)
        or not 1 <= length <= MAX_SUMMARY_TOKENS
    ):
        return Unreadable(
            where,
            f"line {number}: max_tokens {length!r} is not a whole number "
            f"from 1 to {MAX_SUMMARY_TOKENS}",
            doc_id=custom_id,
        )
    instruction = "\n\n".join(s.strip() for s in system if s.strip()) or None
    return record_text(
        where,
        text,
        number,
        max_bytes,
        "the user message",
        doc_id=custom_id,
        instruction=instruction,
        max_tokens=length,
    )


def _content(content) -> str | None:
    """A message's text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        texts = [p.get("text") for p in content if p.get("type") == "text"]
        if all(isinstance(t, str) for t in texts):
            return "\n\n".join(texts)
    return None
