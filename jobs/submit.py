"""Submitting a corpus: read files, record the batch and its rows, queue what needs summarizing.

Work goes in chunks. Each chunk's rows are committed before its messages are
pushed, and if the push fails the chunk's rows are taken back, so there is never
a row waiting for a message that was not sent, nor a message for a row that does
not exist. A document summarized before with the same model and prompt is not
queued again: its row is answered from the earlier result.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property

import redis
import sqlalchemy as sa

from core import queue
from core.database import (
    insert,
    insert_ignoring_conflicts,
    refresh_statistics,
    unavailable,
    vacuum_rollups,
)
from core.errors import SummarizeError
from core.files import read_named
from core.prompt import prompt_hash, result_key
from core.requeue import REQUEUE_EVERY_S
from core.settings import Settings
from core.tables import (
    FINAL,
    GENERATED_COLUMNS,
    PENDING,
    batches,
    documents,
    prompts,
    results,
    utcnow,
)
from jobs import corpus, extraction, formats, records
from jobs.corpus import Text, Unreadable

log = logging.getLogger(__name__)

CHUNK_FILES = 1000
ANALYZE_FIRST = 10_000  # PostgreSQL's statistics refreshed at 10,000 documents, 100,000, …
CHUNK_BYTES = 32 * 1024 * 1024  # texts and records' fields held before a chunk is written
EXAMPLES_KEPT = 10  # problems listed by name in the summary; the rest are counted


@dataclass
class SubmitReport:
    """What `summarize submit` did, for its closing summary."""

    batch: str
    documents: int = 0  # files found (corpus.SUFFIXES), a record file's records each one
    submitted: int = 0  # documents queued for the worker
    deduplicated: int = 0  # answered by an earlier summary, or by one already queued
    already_in_batch: int = 0  # rows this batch had from an earlier submit
    replaced: int = 0  # rows of files (or records) that failed to be read before and read now
    skipped: int = 0  # files of other kinds
    unreadable: int = 0  # text or Markdown files that could not become documents (rows `failed`)
    problems: int = 0  # paths that could not be walked (missing, loops, unreadable folders)
    examples: list[tuple[str, str]] = field(default_factory=list)  # (path, what went wrong)

    @property
    def nothing_usable(self) -> bool:
        """Every path given was refused (missing, unreadable): a typo in a cron line, say."""
        return self.problems > 0 and not (self.documents or self.skipped)

    def note(self, path: str, problem: str) -> None:
        if len(self.examples) < EXAMPLES_KEPT:
            self.examples.append((path, problem))


@dataclass(frozen=True)
class Prompt:
    """What a document is summarized with: a batch's, or a record's own (an OpenAI request's
    system message and max_tokens)."""

    model: str
    instruction: str
    max_tokens: int
    max_sentences: int = 0  # 0: no limit
    schema: str | None = None  # JSON schema text (submit --schema)

    @cached_property  # read for every document's key and row: worked out once per prompt
    def hash(self) -> str:
        return prompt_hash(self.instruction, self.max_tokens, self.max_sentences, self.schema)

    @property
    def row(self) -> dict:
        """As a row of `prompts`, which the worker reads a row's prompt from."""
        return {
            "prompt_hash": self.hash,
            "instruction": self.instruction,
            "max_tokens": self.max_tokens,
            "max_sentences": self.max_sentences or None,
            "schema": self.schema,
        }

    @classmethod
    def from_settings(cls, settings: Settings, schema: dict | None = None) -> Prompt:
        """The batch's prompt; with a JSON schema, the instruction asks for JSON of it and no
        sentence limit applies (a full stop inside a JSON string must not end it)."""
        if schema is None:
            instruction = settings.instruction
            return cls(
                settings.model_name,
                instruction,
                settings.summary_max_tokens,
                settings.sentences_for(instruction),
            )
        text = json.dumps(schema, ensure_ascii=False, sort_keys=True)
        instruction = f"{settings.instruction}\n\n{SCHEMA_NOTE}"
        return cls(settings.model_name, instruction, settings.summary_max_tokens, 0, text)

    def of(self, item: Text, settings: Settings) -> Prompt:
        """The prompt of one document: this one, or with the record's instruction and length."""
        if item.instruction is None and item.max_tokens is None:
            return self
        instruction = item.instruction or self.instruction
        if item.instruction and self.schema:
            instruction = f"{instruction}\n\n{SCHEMA_NOTE}"
        own_limit = settings.sentences_for(instruction) if not self.schema else 0
        return Prompt(
            self.model,
            instruction,
            item.max_tokens or self.max_tokens,
            own_limit if item.instruction else self.max_sentences,
            self.schema,
        )


# Added to a --schema batch's instruction. The grammar makes the JSON valid and spells its keys;
# the schema itself is not shown to the model: SmolLM2-135M given it wrote its words ("title",
# "properties") as key points for 2 of 3 lee-background articles, and 0 of 3 without it.
SCHEMA_NOTE = "Answer in JSON."


DURATION = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(text: str) -> float:
    """`90s`, `45m`, `24h`, `7d`, or plain seconds, as seconds; ValueError with the forms."""
    given = text.strip().lower()
    unit = DURATION.get(given[-1:])
    number = given[:-1] if unit else given
    try:
        seconds = float(number) * (unit or 1)
    except ValueError:
        seconds = -1.0
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"{text!r} is not a duration: write 90s, 45m, 24h or 7d")
    if seconds > MAX_EXPIRY_S:
        raise ValueError(f"{text!r} is longer than the most, 366d")
    return seconds


MAX_SCHEMA_DEPTH = 32  # objects and arrays inside each other; a summary's schema needs a few
MAX_EXPIRY_S = 366 * 86400


def read_schema(path: str | os.PathLike) -> dict:
    """A JSON schema from a file (read as core/files.py reads option files), refused with the
    reason unless it is valid under the JSON Schema meta-schema and at most MAX_SCHEMA_DEPTH
    deep: a schema every document would fail on is refused now, not a night later."""
    from jsonschema import exceptions, validators

    named = f"--schema={os.fspath(path)!r}"
    text = read_named(path, "--schema", "a JSON schema")
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SummarizeError(f"{named} is not JSON ({exc}): give a JSON schema file.") from None
    except RecursionError:
        schema = None  # nested past Python's own limit: refused below
    if schema is not None and (
        not isinstance(schema, dict) or not ({"type", "properties", "$ref", "anyOf"} & set(schema))
    ):
        raise SummarizeError(
            f"{named} is not a JSON schema (an object with `type` and `properties`, e.g. "
            '{"type": "object", "properties": {"points": {"type": "array"}}}).'
        )
    if schema is None or _depth(schema) > MAX_SCHEMA_DEPTH:
        raise SummarizeError(
            f"{named} is nested more than {MAX_SCHEMA_DEPTH} deep: a summary's schema needs a "
            "few levels; flatten it."
        )
    try:
        validators.validator_for(schema).check_schema(schema)
    except exceptions.SchemaError as exc:
        where = "/".join(map(str, exc.path)) or "the top"
        reason = " ".join(exc.message.split())[:300]
        raise SummarizeError(
            f"{named} is not a valid JSON schema: {reason} (at {where}): see "
            "https://json-schema.org/understanding-json-schema/"
        ) from None
    except RecursionError:  # a pattern nested past what Python's regular expressions parse
        raise SummarizeError(f"{named} holds a pattern nested too deeply: simplify it.") from None
    return schema


def _depth(value: object) -> int:
    """How deep objects and arrays nest in a JSON value, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack and deepest <= MAX_SCHEMA_DEPTH:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return deepest


def default_batch_name(paths: Iterable[str]) -> str:
    """`<first folder>-<local time>`, e.g. `lee-background-20261129-0735`."""
    first = next(iter(paths), "batch")
    stem = os.path.basename(os.path.normpath(os.path.abspath(first))) or "batch"
    stem = "".join(c if c.isalnum() or c in "-_." else "-" for c in stem)[:80]
    return f"{stem}-{datetime.now():%Y%m%d-%H%M%S}"


def count_documents(paths: Iterable[str], follow_links: bool = False) -> int:
    """About how many documents a submit of `paths` will make, for its progress bar: one per
    file, and a record file's lines (a quick first pass; blank lines and CSV cells that span
    lines make it a little high)."""
    return sum(
        records.estimate(found) if corpus.holds_records(found.path) else 1
        for found in corpus.walk(paths, follow_links)
        if found.kind == "document"
    )


def check_batch(
    db: sa.Engine,
    name: str,
    prompt: Prompt,
    meta: dict | None = None,
    expire_after_s: float | None = None,
) -> dict | None:
    """Check that an existing batch used the same model, prompt and metadata (`--meta`; a
    later submit may leave it out); for a new one, the row to make it with, which is made
    with its first documents' rows (a submit that queues nothing leaves no empty batch)."""
    longest = batches.c.name.type.length
    if len(name) > longest:
        raise SummarizeError(
            f"The batch name is {len(name):,} characters long; at most {longest} fit: "
            "choose a shorter --batch."
        )
    with db.connect() as conn:
        row = conn.execute(
            sa.select(batches, prompts.c.schema)
            .join(prompts, prompts.c.prompt_hash == batches.c.prompt_hash, isouter=True)
            .where(batches.c.name == name)
        ).first()
    if row is None:
        return {
            "name": name,
            "model": prompt.model,
            "instruction": prompt.instruction,
            "max_tokens": prompt.max_tokens,
            "max_sentences": prompt.max_sentences or None,
            "prompt_hash": prompt.hash,
            "created_at": utcnow(),
            "metadata": _json(meta) if meta else None,
            "expires_at": utcnow() + timedelta(seconds=expire_after_s) if expire_after_s else None,
        }
    if (row.model, row.prompt_hash) != (prompt.model, prompt.hash):
        raise SummarizeError(
            f"Batch {name!r} was submitted with other settings: {_differences(row, prompt)}: "
            "submit with the batch's settings, or choose another --batch name."
        )
    if meta and row.metadata != _json(meta):
        raise SummarizeError(
            f"Batch {name!r} was submitted with other --meta ({row.metadata or 'none'}): "
            "repeat the same --meta, leave it out, or choose another --batch name."
        )
    return None


def _differences(stored: sa.Row, prompt: Prompt) -> str:
    """What differs between a batch's settings and a submit's, each with both values."""
    pairs = (
        ("model", stored.model, prompt.model),
        ("instruction", stored.instruction, prompt.instruction),
        ("summary length", stored.max_tokens, prompt.max_tokens),
        ("sentence limit", stored.max_sentences or 0, prompt.max_sentences),
        ("schema", stored.schema, prompt.schema),
    )
    differ = [
        f"{what} {_shortened(then)} (now {_shortened(now)})"
        for what, then, now in pairs
        if then != now
    ]
    return "; ".join(differ) or "a setting (its prompt's hash)"


def _shortened(value: object) -> str:
    if value is None:
        return "none"
    text = str(value)
    return repr(text if len(text) <= 60 else text[:59] + "…") if isinstance(value, str) else text


def _json(value: dict) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def submit(
    settings: Settings,
    db: sa.Engine,
    client: redis.Redis,
    paths: Iterable[str],
    batch: str,
    on_document: Callable[[], None] = lambda: None,
    follow_links: bool = False,
    fields: records.FieldChoice = records.DEFAULT_CHOICE,
    meta: dict | None = None,
    schema: dict | None = None,
    expire_after_s: float | None = None,
) -> SubmitReport:
    """Record `paths` as rows of `batch` and queue every document that needs a summary.

    `on_document` is called after each document read (each file, each record); with
    `schema`, every summary is JSON of that schema."""
    prompt = Prompt.from_settings(settings, schema)
    new_batch = check_batch(db, batch, prompt, meta, expire_after_s)
    report = SubmitReport(batch)
    chunk: list[Text | Unreadable] = []
    chunk_bytes = 0
    analyze_at = ANALYZE_FIRST
    extractors = extraction.Extractors(
        settings.extract_processes, settings.extract_timeout_s, settings.extract_memory_mb
    )
    with extractors:
        for item in extractors.in_order(_entries(paths, follow_links, settings, fields, report)):
            report.documents += 1
            chunk.append(item)
            chunk_bytes += item.weight if isinstance(item, Text) else 0
            if len(chunk) >= CHUNK_FILES or chunk_bytes >= CHUNK_BYTES:
                _submit_chunk(settings, db, client, batch, prompt, chunk, report, new_batch)
                chunk, chunk_bytes = [], 0
                analyze_at = _statistics(db, report, analyze_at)
            on_document()
    if chunk:
        _submit_chunk(settings, db, client, batch, prompt, chunk, report, new_batch)
        _statistics(db, report, analyze_at)
    vacuum_rollups(db)
    return report


def _entries(paths, follow_links: bool, settings: Settings, fields, report: SubmitReport):
    """What the walk finds, for `Extractors.in_order`: each file read or opened, a record
    file as the stream of its records; paths that cannot be walked and files of other
    kinds are counted here. Whatever one file raises is its own failed row."""
    for found in corpus.walk(paths, follow_links):
        if found.kind == "skipped":
            report.skipped += 1
        elif found.kind == "problem":
            report.problems += 1
            report.note(corpus.shown(found.path), found.problem or "cannot be used")
        elif corpus.holds_records(found.path) and not found.problem:
            read = records.read(found, settings.max_doc_bytes, fields.of(found.path))
            yield _guarded(found, read)
        else:
            try:
                yield corpus.load(found, settings.max_doc_bytes)
            except Exception as exc:  # noqa: BLE001 - one file must never stop the night
                yield Unreadable(corpus.shown(found.path), _failed(exc))


def _guarded(found: corpus.Found, items: Iterator[Text | Unreadable]):
    """A record file's records; if reading it fails past what records.py foresaw, the file's
    own failed row says where, and the submit goes on with the next file."""
    read = 0
    try:
        for item in items:
            read += 1
            yield item
    except Exception as exc:  # noqa: BLE001 - one file must never stop the night
        where = f" after {read:,} records" if read else ""
        yield Unreadable(corpus.shown(found.path), f"{_failed(exc)}{where}")


def _failed(exc: BaseException) -> str:
    return f"could not be read ({formats.described(exc)})"


def _statistics(db: sa.Engine, report: SubmitReport, analyze_at: int) -> int:
    """Refresh PostgreSQL's statistics each time the submit grew tenfold; returns the next
    size to do it at. They only speed up the worker: a failure is a warning."""
    if report.documents < analyze_at:
        return analyze_at
    try:
        refresh_statistics(db)
    except sa.exc.SQLAlchemyError as exc:
        log.warning("could not refresh the database's statistics (the worker may be slow): %s", exc)
    while analyze_at <= report.documents:
        analyze_at *= 10
    return analyze_at


def _submit_chunk(
    settings: Settings,
    db: sa.Engine,
    client: redis.Redis,
    batch: str,
    prompt: Prompt,
    chunk: list[Text | Unreadable],
    report: SubmitReport,
    new_batch: dict | None,
) -> None:
    now = utcnow()
    paths: list[str] = []

    def write(conn: sa.Connection) -> list[str]:
        conn.execute(
            insert_ignoring_conflicts(db, prompts).values(prompt.row | {"created_at": now})
        )
        if new_batch is not None:  # made with its first rows; the later chunks find it
            conn.execute(insert_ignoring_conflicts(db, batches).values(new_batch))
        rows, keys, texts, own, replaced = _plan(conn, batch, prompt, chunk, report, settings, now)
        if replaced:
            conn.execute(results.delete().where(results.c.id.in_(replaced)))
        if own:  # records' own prompts (OpenAI requests), for the worker to read
            conn.execute(
                insert_ignoring_conflicts(db, prompts),
                [p.row | {"created_at": now} for p in own.values()],
            )
        _store(conn, db, texts, now, keep_all=settings.keep_texts)
        if rows:
            conn.execute(results.insert(), rows)
        paths.extend(row["source_path"] for row in rows)
        return keys

    def take_back(conn: sa.Connection, _keys: list[str]) -> None:
        """Redis refused the chunk's messages: its rows go, as if never submitted (and the
        batch, if they were its first)."""
        if paths:
            conn.execute(
                results.delete().where(results.c.batch == batch, results.c.source_path.in_(paths))
            )
        if new_batch is not None:
            rows = sa.select(results.c.id).where(results.c.batch == batch).limit(1)
            conn.execute(batches.delete().where(batches.c.name == batch, ~sa.exists(rows)))

    try:
        queued = queue.commit_then_push(settings, db, write, take_back, model=prompt.model)
    except sa.exc.OperationalError as exc:
        raise unavailable(settings, exc) from exc
    report.submitted += len(queued)


def _store(conn, db: sa.Engine, texts: dict[str, tuple[Text, bool]], now, keep_all: bool):
    """Store the documents the rows refer to: with their text where a row will need it.

    A text stored before and dropped since (core/retention.py) is stored again when a row
    needs it. On PostgreSQL that conflict locks the document row even when the text is
    there, so a worker dropping it at the same moment waits for this submit to commit and
    then sees its new rows. Sorted by hash: locks taken in one order never deadlock.
    """
    needed, answered = [], []
    for _, (text, needs_text) in sorted(texts.items()):
        row = {"content_hash": text.content_hash, "size_bytes": text.size_bytes, "created_at": now}
        if needs_text or keep_all:
            needed.append(row | {"body": text.body})
        else:
            answered.append(row | {"body": None})
    if needed:
        statement = insert(db, documents)
        conn.execute(
            statement.on_conflict_do_update(
                index_elements=[documents.c.content_hash],
                set_={"body": statement.excluded.body},
                where=documents.c.body.is_(None),
            ),
            needed,
        )
    if answered:  # already summarized: only the hash is kept, as after any summary
        conn.execute(insert_ignoring_conflicts(db, documents), answered)


def _plan(conn, batch, prompt, chunk, report, settings, now):
    """Decide each document's row: queued (with or without a new message), answered, or
    failed; the prompts of its own that records brought; and the rows of files that failed
    to be read before and read now, which the new rows replace."""
    paths = {item.path for item in chunk}
    paths |= {item.file for item in chunk if isinstance(item, Text) and item.file}
    existing = {
        row.source_path: row
        for row in conn.execute(
            sa.select(
                results.c.id, results.c.source_path, results.c.status, results.c.content_hash
            ).where(results.c.batch == batch, results.c.source_path.in_(paths))
        )
    }
    replaced: list[int] = []
    texts: dict[str, tuple[Text, bool]] = {}  # by hash: the text, and whether a row needs it
    keyed: list[tuple[Text, str, Prompt]] = []
    own: dict[str, Prompt] = {}
    rows: list[dict] = []
    # Every row names every column: one executemany statement inserts them all.
    base = dict.fromkeys(_ROW_COLUMNS) | {
        "batch": batch,
        "model": prompt.model,
        "prompt_hash": prompt.hash,
        "attempts": 0,
        "created_at": now,
        "deduplicated": False,
    }
    for item in chunk:
        earlier = existing.get(item.path)
        if earlier is not None and not (isinstance(item, Text) and _unread(earlier)):
            report.already_in_batch += 1
            continue
        for row in (earlier, existing.pop(getattr(item, "file", None), None)):
            if row is not None and _unread(row):  # the file (or record) reads now
                replaced.append(row.id)
        if isinstance(item, Unreadable):
            report.unreadable += 1
            report.note(item.path, item.reason)
            rows.append(
                base
                | {
                    "source_path": item.path,
                    "doc_id": item.doc_id or item.path,
                    "status": "failed",
                    "error": item.reason,
                    "finished_at": now,
                }
            )
            continue
        mine = prompt.of(item, settings)
        if mine is not prompt:
            own[mine.hash] = mine
        keyed.append((item, result_key(item.content_hash, prompt.model, mine.hash), mine))
    done, in_flight = _earlier_results(conn, {key for _, key, _ in keyed})
    keys_to_queue: dict[str, str] = {}
    for item, key, mine in keyed:
        row = base | {
            "source_path": item.path,
            "content_hash": item.content_hash,
            "result_key": key,
            "prompt_hash": mine.hash,
            "doc_id": item.doc_id or item.path,
            "metadata": item.metadata,
        }
        needed = texts.get(item.content_hash, (item, False))[1]  # a text may have two prompts
        texts[item.content_hash] = (item, needed or key not in done)
        if key in done:
            report.deduplicated += 1
            rows.append(
                row
                | done[key]
                | {
                    "status": "succeeded",
                    "deduplicated": True,
                    "started_at": now,
                    "finished_at": now,
                }
            )
        elif key in in_flight or key in keys_to_queue:
            # Answered by a generation already queued: its tokens are counted on that row.
            report.deduplicated += 1
            rows.append(row | {"status": "queued", "deduplicated": True})
        else:
            keys_to_queue[key] = item.content_hash
            rows.append(row | {"status": "queued"})
    report.replaced += len(replaced)
    return rows, keys_to_queue, texts, own, replaced


def _unread(row: sa.Row) -> bool:
    """A row of a file (or a record) that failed to be read, so it has no text."""
    return row.status == "failed" and row.content_hash is None


_SET_BY_BATCH = ("id", "batch", "model", "prompt_hash", "attempts", "deduplicated", "created_at")
_ROW_COLUMNS = tuple(c.name for c in results.columns if c.name not in _SET_BY_BATCH)


def _earlier_results(conn, keys: set[str]) -> tuple[dict[str, dict], set[str]]:
    """Of these result keys: which have a summary already, and which are queued or running.

    A summary is read from the row that generated it, not from the copies deduplication
    made of it: a corpus submitted every night holds a copy a night of each key, and
    reading them all made each submit slower than the last. Only a key whose generating row
    was purged is looked up among its copies.
    """
    if not keys:
        return {}, set()
    done: dict[str, dict] = {}
    in_flight: set[str] = set()

    def read(keys: set[str], which: sa.ColumnElement) -> None:
        found = conn.execute(
            sa.select(
                results.c.result_key, results.c.status, *(results.c[c] for c in GENERATED_COLUMNS)
            )
            .where(results.c.result_key.in_(keys), which)
            .order_by(results.c.id)
        )
        for row in found:
            if row.status != "succeeded":
                in_flight.add(row.result_key)
            elif row.result_key not in done:
                done[row.result_key] = {c: getattr(row, c) for c in GENERATED_COLUMNS}

    succeeded = results.c.status == "succeeded"
    read(keys, sa.or_(results.c.status.in_(PENDING), succeeded & ~results.c.deduplicated))
    if missing := keys - done.keys() - in_flight:
        read(missing, succeeded & results.c.deduplicated)
    return done, in_flight


@dataclass(frozen=True)
class Progress:
    """How far a batch has come."""

    total: int
    by_status: dict[str, int]

    @property
    def finished(self) -> int:
        return sum(self.by_status.get(status, 0) for status in FINAL)

    @property
    def done(self) -> bool:
        return self.finished >= self.total

    @property
    def all_succeeded(self) -> bool:
        return self.by_status.get("succeeded", 0) == self.total


def progress(db: sa.Engine, batch: str) -> Progress:
    with db.connect() as conn:
        counts = dict(
            conn.execute(
                sa.select(results.c.status, sa.func.count())
                .where(results.c.batch == batch)
                .group_by(results.c.status)
            ).all()
        )
    return Progress(sum(counts.values()), counts)


def wait(
    db: sa.Engine,
    batch: str,
    *,
    deadline_s: float | None = None,
    poll_s: float = 1.0,
    on_progress: Callable[[Progress], None] = lambda p: None,
    requeue: Callable[[], object] | None = None,
) -> Progress:
    """Block until every row of the batch is final, or the deadline passes.

    `requeue` runs every REQUEUE_EVERY_S, to put back documents whose message Redis lost.
    """
    start = last_requeue = time.monotonic()
    while True:
        now = progress(db, batch)
        on_progress(now)
        if now.done:
            return now
        if deadline_s is not None and time.monotonic() - start >= deadline_s:
            return now
        if requeue is not None and time.monotonic() - last_requeue >= REQUEUE_EVERY_S:
            requeue()
            last_requeue = time.monotonic()
        time.sleep(poll_s)
