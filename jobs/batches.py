"""A batch's life: named and checked against an earlier submit's settings (its row made
with its first documents' rows, jobs/submit.py), then its failures retried and what waits
cancelled."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from core import producer, retention
from core.errors import SummarizeError
from core.prompt import SummarySpec
from core.settings import Settings
from core.tables import Status, batches, prompts, results, utcnow

MAX_EXPIRY_S = 366 * 86400
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


def default_batch_name(paths: Iterable[str]) -> str:
    """`<first folder>-<local time>`, e.g. `lee-background-20261129-0735`."""
    first = next(iter(paths), "batch")
    stem = os.path.basename(os.path.normpath(os.path.abspath(first))) or "batch"
    stem = "".join(c if c.isalnum() or c in "-_." else "-" for c in stem)[:80]
    return f"{stem}-{datetime.now():%Y%m%d-%H%M%S}"


def check_batch(
    db: sa.Engine,
    name: str,
    settings: Settings,
    spec: SummarySpec,
    meta: dict | None = None,
    expire_after_s: float | None = None,
) -> dict | None:
    """Check that an existing batch used the same model, prompt and metadata (`--meta`; a
    later submit may leave it out); for a new one, the row to make it with, which is made
    with its first documents' rows (a submit that queues nothing leaves no empty batch). Its
    model and priority are the settings' (a later submit's priority is its own messages')."""
    model = settings.model_name
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
            "model": model,
            "instruction": spec.instruction,
            "max_tokens": spec.max_tokens,
            "max_sentences": spec.max_sentences,
            "prompt_hash": spec.hash,
            "created_at": utcnow(),
            "metadata": _json(meta) if meta else None,
            "expires_at": utcnow() + timedelta(seconds=expire_after_s) if expire_after_s else None,
            "priority": settings.priority,
        }
    if (row.model, row.prompt_hash) != (model, spec.hash):
        raise SummarizeError(
            f"Batch {name!r} was submitted with other settings: {_differences(row, model, spec)}: "
            "submit with the batch's settings, or choose another --batch name."
        )
    if meta and row.metadata != _json(meta):
        raise SummarizeError(
            f"Batch {name!r} was submitted with other --meta ({row.metadata or 'none'}): "
            "repeat the same --meta, leave it out, or choose another --batch name."
        )
    return None


def _differences(stored: sa.Row, model: str, spec: SummarySpec) -> str:
    """What differs between a batch's settings and a submit's, each with both values."""
    pairs = (
        ("model", stored.model, model),
        ("instruction", stored.instruction, spec.instruction),
        ("summary length", stored.max_tokens, spec.max_tokens),
        ("sentence limit", stored.max_sentences, spec.max_sentences),
        ("schema", stored.schema, spec.schema),
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


CANCELLED = "cancelled by summarize cancel"


@dataclass(frozen=True)
class Retried:
    documents: int  # distinct documents queued again
    rows: int  # failed rows now queued
    unreadable: int  # failed at submit (no text): fix the files and submit again


def retry_failed(db: sa.Engine, settings: Settings, batch: str) -> Retried:
    """Queue the batch's failed documents again, with fresh attempts."""
    failed = sa.and_(results.c.batch == batch, results.c.status == Status.FAILED)
    retryable = sa.and_(failed, results.c.content_hash.is_not(None))
    counts = {}
    with db.connect() as conn:  # to its model's queue at its priority, whoever retries
        model, priority = conn.execute(
            sa.select(batches.c.model, batches.c.priority).where(batches.c.name == batch)
        ).one_or_none() or (None, None)

    def write(conn: sa.Connection) -> list[str]:
        counts["unreadable"] = conn.execute(
            sa.select(sa.func.count()).where(failed, results.c.content_hash.is_(None))
        ).scalar()
        keys = conn.execute(sa.select(results.c.result_key).where(retryable).distinct())
        keys = keys.scalars().all()
        counts["rows"] = conn.execute(
            results.update()
            .where(retryable)
            .values(
                status=Status.QUEUED,
                attempts=0,
                error=None,
                started_at=None,
                finished_at=None,
                deduplicated=False,
            )
        ).rowcount
        return keys

    def failed_again(conn: sa.Connection, keys: list[str]) -> None:
        """Redis refused the messages: the rows are failed again, saying so."""
        conn.execute(
            results.update()
            .where(
                results.c.batch == batch,
                results.c.result_key.in_(keys),
                results.c.status == Status.QUEUED,
            )
            .values(status=Status.FAILED, error=RETRY_UNSENT, finished_at=utcnow())
        )

    keys = producer.commit_then_push(settings, db, write, failed_again, model, priority)
    return Retried(len(keys), counts["rows"], counts["unreadable"])


RETRY_UNSENT = "`summarize retry` could not reach Redis to queue it: run the retry again"


def cancel(db: sa.Engine, batch: str, *, keep_texts: bool = False) -> int:
    """Mark the batch's queued rows cancelled; running ones finish. Returns how many."""
    with db.begin() as conn:
        return retention.end_queued(
            conn,
            results.c.batch == batch,
            status=Status.CANCELLED,
            error=CANCELLED,
            keep_texts=keep_texts,
        )
