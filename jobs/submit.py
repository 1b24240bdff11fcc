"""Submitting a corpus: read files, record the batch and its rows, queue what needs summarizing.

Work goes in chunks. Each chunk's rows are committed before its messages are
pushed, and if the push fails the chunk's rows are taken back, so there is never
a row waiting for a message that was not sent, nor a message for a row that does
not exist. A document summarized before with the same model and prompt is not
queued again: its row is answered from the earlier result.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import redis
import sqlalchemy as sa

from core import producer
from core.database import (
    insert,
    insert_ignoring_conflicts,
    refresh_statistics,
    unavailable,
    vacuum_rollups,
)
from core.errors import described
from core.prompt import SummarySpec, result_key
from core.settings import Settings
from core.tables import (
    GENERATED_COLUMNS,
    PENDING,
    Status,
    batches,
    documents,
    prompts,
    results,
    utcnow,
)
from jobs import corpus, extraction, folders, objects, parquet, records
from jobs.batches import check_batch
from jobs.documents import Text, Unreadable
from jobs.fields import DEFAULT_CHOICE, FieldChoice
from jobs.folders import PARQUET
from jobs.prompts import batch_spec, spec_of

log = logging.getLogger(__name__)

CHUNK_FILES = 1000
ANALYZE_FIRST = 10_000  # PostgreSQL's statistics refreshed at 10,000 documents, 100,000, …
CHUNK_BYTES = 32 * 1024 * 1024  # texts and records' fields held before a chunk is written
EXAMPLES_KEPT = 10  # problems listed by name in the summary; the rest are counted


@dataclass
class SubmitReport:
    """What `summarize submit` did, for its closing summary."""

    batch: str
    documents: int = 0  # files found (folders.SUFFIXES), a record file's records each one
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


def count_documents(paths: Iterable[str], follow_links=False, storage_options=None) -> int:
    """About how many documents a submit of `paths` will make, for its progress bar: one per
    file, and a record file's lines (a quick first pass that may be a little high)."""
    return sum(
        _reader(found.path).estimate(found) if folders.holds_records(found.path) else 1
        for found in corpus.found_in(paths, follow_links, storage_options)
        if found.kind == "document"
    )


def submit(
    settings: Settings,
    db: sa.Engine,
    client: redis.Redis,
    paths: Iterable[str],
    batch: str,
    on_document: Callable[[], None] = lambda: None,
    follow_links: bool = False,
    fields: FieldChoice = DEFAULT_CHOICE,
    meta: dict | None = None,
    schema: dict | None = None,
    expire_after_s: float | None = None,
) -> SubmitReport:
    """Record `paths` as rows of `batch` and queue every document that needs a summary.

    `on_document` is called after each document read (each file, each record); with
    `schema`, every summary is JSON of that schema."""
    spec = batch_spec(settings, schema)
    new_batch = check_batch(db, batch, settings, spec, meta, expire_after_s)
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
                _submit_chunk(settings, db, client, batch, spec, chunk, report, new_batch)
                chunk, chunk_bytes = [], 0
                analyze_at = _statistics(db, report, analyze_at)
            on_document()
    if chunk:
        _submit_chunk(settings, db, client, batch, spec, chunk, report, new_batch)
        _statistics(db, report, analyze_at)
    vacuum_rollups(db)
    return report


def _entries(paths, follow_links: bool, settings: Settings, fields, report: SubmitReport):
    """What the walk finds, for `Extractors.in_order`: each file read or opened, a record file
    as its records' stream; what is not a document is counted. One file's error is its row."""
    found_in = corpus.found_in(paths, follow_links, settings.storage_options)
    for found in objects.fetched(found_in, settings.max_doc_bytes):
        if found.kind == "skipped":
            report.skipped += 1
        elif found.kind == "problem":
            report.problems += 1
            report.note(folders.shown(found.path), found.problem or "cannot be used")
        elif folders.holds_records(found.path) and not found.problem:
            read = _reader(found.path).read(found, settings.max_doc_bytes, fields.of(found.path))
            yield _guarded(found, read)
        else:
            try:
                yield corpus.load(found, settings.max_doc_bytes)
            except Exception as exc:  # noqa: BLE001 - one file must never stop the night
                yield Unreadable(folders.shown(found.path), _failed(exc))


def _reader(path: str):
    """The module that reads a record file: Parquet's rows, or JSON lines' and CSV's records."""
    return parquet if path.lower().endswith(PARQUET) else records


def _guarded(found: folders.Found, items: Iterator[Text | Unreadable]):
    """A record file's records; if reading it fails past what records.py foresaw, the file's
    own failed row says where, and the submit goes on with the next file."""
    read = 0
    try:
        for item in items:
            read += 1
            yield item
    except Exception as exc:  # noqa: BLE001 - one file must never stop the night
        where = f" after {read:,} records" if read else ""
        yield Unreadable(folders.shown(found.path), f"{_failed(exc)}{where}")


def _failed(exc: BaseException) -> str:
    return f"could not be read ({described(exc)})"


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
    spec: SummarySpec,
    chunk: list[Text | Unreadable],
    report: SubmitReport,
    new_batch: dict | None,
) -> None:
    now = utcnow()
    paths: list[str] = []

    def write(conn: sa.Connection) -> list[str]:
        conn.execute(insert_ignoring_conflicts(db, prompts).values(spec.row | {"created_at": now}))
        if new_batch is not None:  # made with its first rows; the later chunks find it
            conn.execute(insert_ignoring_conflicts(db, batches).values(new_batch))
        rows, keys, texts, own, replaced = _plan(conn, batch, spec, chunk, report, settings, now)
        if replaced:
            conn.execute(results.delete().where(results.c.id.in_(replaced)))
        if own:  # records' own prompts (OpenAI requests), for the worker to read
            conn.execute(
                insert_ignoring_conflicts(db, prompts),
                [s.row | {"created_at": now} for s in own.values()],
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
        queued = producer.commit_then_push(
            settings, db, write, take_back, model=settings.model_name
        )
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


def _plan(conn, batch, spec, chunk, report, settings, now):
    """Decide each document's row: queued (with or without a new message), answered, or
    failed; the specs of their own that records brought; and the rows of files that failed
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
    model = settings.model_name
    replaced: list[int] = []
    texts: dict[str, tuple[Text, bool]] = {}  # by hash: the text, and whether a row needs it
    keyed: list[tuple[Text, str, SummarySpec]] = []
    own: dict[str, SummarySpec] = {}
    rows: list[dict] = []
    # Every row names every column: one executemany statement inserts them all.
    base = dict.fromkeys(_ROW_COLUMNS) | {
        "batch": batch,
        "model": model,
        "prompt_hash": spec.hash,
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
                    "status": Status.FAILED,
                    "error": item.reason,
                    "finished_at": now,
                }
            )
            continue
        mine = spec_of(item, spec, settings)
        if mine is not spec:
            own[mine.hash] = mine
        keyed.append((item, result_key(item.content_hash, model, mine.hash), mine))
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
                    "status": Status.SUCCEEDED,
                    "deduplicated": True,
                    "started_at": now,
                    "finished_at": now,
                }
            )
        elif key in in_flight or key in keys_to_queue:
            # Answered by a generation already queued: its tokens are counted on that row.
            report.deduplicated += 1
            rows.append(row | {"status": Status.QUEUED, "deduplicated": True})
        else:
            keys_to_queue[key] = item.content_hash
            rows.append(row | {"status": Status.QUEUED})
    report.replaced += len(replaced)
    return rows, keys_to_queue, texts, own, replaced


def _unread(row: sa.Row) -> bool:
    """A row of a file (or a record) that failed to be read, so it has no text."""
    return row.status == Status.FAILED and row.content_hash is None


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
            if row.status != Status.SUCCEEDED:
                in_flight.add(row.result_key)
            elif row.result_key not in done:
                done[row.result_key] = {c: getattr(row, c) for c in GENERATED_COLUMNS}

    succeeded = results.c.status == Status.SUCCEEDED
    read(keys, sa.or_(results.c.status.in_(PENDING), succeeded & ~results.c.deduplicated))
    if missing := keys - done.keys() - in_flight:
        read(missing, succeeded & results.c.deduplicated)
    return done, in_flight
