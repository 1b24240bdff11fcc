"""The API's batches: OpenAI's batch object over an ordinary batch of the queue.

A batch made here is a batch like any other (`summarize status`, the dashboards and Grafana
show it), named by its id. Made, it is `validating` while its input file is submitted (in a
thread of the server, as `summarize submit` would), then `in_progress` until no document
waits, then `completed`, or `expired` when its completion window ended some, or `cancelling`
and `cancelled` once cancel was asked. `failed` is a batch whose input file could not be
submitted, with `errors`. Its output and error files are written once it has ended, by the
code of `summarize results --format openai`.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from datetime import datetime

import redis
import sqlalchemy as sa

from api.files import Refused, new_id, path_of
from core import notices
from core.errors import described
from core.settings import PRIORITY_NAMES, Settings, parse_notify_url
from core.tables import Status, api_batches, stored_files, utcnow
from jobs import batches as jobs_batches
from jobs import submit as submitting
from readers import export
from readers.status import BatchStatus, batch_status

log = logging.getLogger(__name__)

ENDPOINT = "/v1/chat/completions"  # what a summary answers; OpenAI's other endpoints are not
METADATA_PAIRS, METADATA_KEY, METADATA_VALUE = 16, 64, 512  # OpenAI's bounds
NOTIFY_KEY = "notify_url"  # the metadata that names where the batch's end is told
PRIORITY_KEY = "priority"  # the metadata that gives the batch's priority (submit --priority)
LIST_MOST = 100
_finishing = threading.Lock()  # one thread writes a batch's output files


def create(settings: Settings, db: sa.Engine, client: redis.Redis, owner: str, body: dict) -> dict:
    """A new batch of `owner`'s input file, validated and queued in a thread; its object."""
    file_id, endpoint, window, metadata = _asked(body)
    if _notify_url(settings, metadata) and settings.notify_secret is None:
        raise Refused(
            400,
            "This server cannot sign notices: start it with SUMMARIZE_NOTIFY_SECRET set "
            "(`summarize keys secret` makes one).",
            "metadata",
        )
    with db.connect() as conn:
        found = conn.execute(
            sa.select(stored_files.c.id).where(
                stored_files.c.id == file_id,
                stored_files.c.owner == owner,
                stored_files.c.purpose == "batch",
            )
        ).first()
    if found is None:
        raise Refused(404, f"No such File object: {file_id}", "input_file_id", "not_found")
    batch_id = "batch_" + secrets.token_hex(12)
    with db.begin() as conn:
        conn.execute(
            api_batches.insert().values(
                id=batch_id,
                owner=owner,
                input_file_id=file_id,
                endpoint=endpoint,
                completion_window=window,
                metadata=json.dumps(metadata) if metadata is not None else None,
                created_at=utcnow(),
            )
        )
    start_validating(settings, db, client, batch_id)
    return retrieve(settings, db, owner, batch_id)


def _asked(body: dict) -> tuple[str, str, str, dict | None]:
    if not isinstance(body, dict):
        raise Refused(400, "The request body must be a JSON object.")
    file_id = body.get("input_file_id")
    if not isinstance(file_id, str) or not file_id:
        raise Refused(
            400,
            "input_file_id is required: the id of an uploaded batch input file.",
            "input_file_id",
        )
    endpoint = body.get("endpoint")
    if endpoint != ENDPOINT:
        raise Refused(
            400,
            f"endpoint {str(endpoint)[:80]!r} is not served here: only {ENDPOINT} (summaries).",
            "endpoint",
        )
    window = body.get("completion_window")
    try:
        if not isinstance(window, str):
            raise ValueError("completion_window is required, such as '24h'")
        jobs_batches.duration_s(window)
    except ValueError as exc:
        raise Refused(400, f"completion_window: {exc}.", "completion_window") from None
    metadata = body.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict)
        and len(metadata) <= METADATA_PAIRS
        and all(
            isinstance(k, str)
            and isinstance(v, str)
            and len(k) <= METADATA_KEY
            and len(v) <= METADATA_VALUE
            for k, v in metadata.items()
        )
    ):
        raise Refused(
            400,
            f"metadata must be an object of at most {METADATA_PAIRS} string pairs (keys up to "
            f"{METADATA_KEY} characters, values up to {METADATA_VALUE}).",
            "metadata",
        )
    if metadata and metadata.get(PRIORITY_KEY, "normal") not in PRIORITY_NAMES:
        raise Refused(
            400, f"metadata.{PRIORITY_KEY} must be one of {', '.join(PRIORITY_NAMES)}.", "metadata"
        )
    if metadata and NOTIFY_KEY in metadata:
        try:
            parse_notify_url(metadata[NOTIFY_KEY])
        except ValueError as exc:
            raise Refused(400, f"metadata.{NOTIFY_KEY} {exc}.", "metadata") from None
    return file_id, endpoint, window, metadata


def start_validating(settings: Settings, db: sa.Engine, client: redis.Redis, batch_id: str) -> None:
    threading.Thread(
        target=_validate,
        args=(settings, db, client, batch_id),
        name=f"validate {batch_id}",
        daemon=True,
    ).start()


def resume(settings: Settings, db: sa.Engine, client: redis.Redis) -> int:
    """Validate again the batches a stopped server left `validating` (submit is idempotent:
    the rows already made are found, not made twice)."""
    with db.connect() as conn:
        waiting = list(
            conn.execute(
                sa.select(api_batches.c.id).where(
                    api_batches.c.in_progress_at.is_(None), api_batches.c.failed_at.is_(None)
                )
            ).scalars()
        )
    for batch_id in waiting:
        start_validating(settings, db, client, batch_id)
    return len(waiting)


def _validate(settings: Settings, db: sa.Engine, client: redis.Redis, batch_id: str) -> None:
    with db.connect() as conn:
        row = conn.execute(sa.select(api_batches).where(api_batches.c.id == batch_id)).one()
    metadata = json.loads(row.metadata) if row.metadata else {}
    try:
        report = submitting.submit(
            settings.with_changes(priority=metadata.get(PRIORITY_KEY)),
            db,
            client,
            [str(path_of(settings, row.input_file_id))],
            batch_id,
            meta=metadata or None,
            expire_after_s=jobs_batches.duration_s(row.completion_window),
        )
        problem = None if report.documents else "the input file holds no request"
        if report.nothing_usable:
            problem = report.examples[0][1] if report.examples else "the input file cannot be read"
    except Exception as exc:  # noqa: BLE001 - the batch fails, the server goes on
        log.exception("batch %s could not be submitted", batch_id)
        problem = described(exc)
    values = {"in_progress_at": utcnow()}
    if problem:
        error = {"code": "invalid_file", "line": None, "message": problem, "param": "input_file_id"}
        values = {"failed_at": utcnow(), "errors": json.dumps([error])}
    with db.begin() as conn:
        conn.execute(api_batches.update().where(api_batches.c.id == batch_id).values(**values))
        cancelled = conn.execute(
            sa.select(api_batches.c.cancelling_at).where(api_batches.c.id == batch_id)
        ).scalar()
    if cancelled and not problem:  # cancel was asked while it was validating
        jobs_batches.cancel(db, batch_id, keep_texts=settings.keep_texts)
    url = _notify_url(settings, metadata)
    if url:  # from now on its end is told (a batch that failed here: at once)
        notices.watch(db, batch_id, url)


def _notify_url(settings: Settings, metadata: dict | None) -> str | None:
    """Where the batch's end is told: its metadata's `notify_url`, or SUMMARIZE_NOTIFY_URL."""
    return (metadata or {}).get(NOTIFY_KEY) or settings.notify_url


def retrieve(settings: Settings, db: sa.Engine, owner: str, batch_id: str) -> dict:
    with db.connect() as conn:
        row = conn.execute(
            sa.select(api_batches).where(api_batches.c.id == batch_id, api_batches.c.owner == owner)
        ).first()
    if row is None:
        raise Refused(404, f"No such Batch object: {batch_id}", "batch_id", "not_found")
    (status,) = batch_status(db, [row.id]) or [None]
    return _object(settings, db, row, status)


def listed(settings: Settings, db: sa.Engine, owner: str, after: str | None, limit: int) -> dict:
    """A page of the owner's batches, newest first, after the batch `after`."""
    query = sa.select(api_batches).where(api_batches.c.owner == owner)
    with db.connect() as conn:
        if after:
            mark = conn.execute(
                sa.select(api_batches.c.created_at).where(
                    api_batches.c.id == after, api_batches.c.owner == owner
                )
            ).scalar()
            if mark is None:
                raise Refused(404, f"No such Batch object: {after}", "after", "not_found")
            query = query.where(
                sa.or_(
                    api_batches.c.created_at < mark,
                    sa.and_(api_batches.c.created_at == mark, api_batches.c.id < after),
                )
            )
        rows = conn.execute(
            query.order_by(api_batches.c.created_at.desc(), api_batches.c.id.desc()).limit(
                limit + 1
            )
        ).all()
    page = rows[:limit]
    figures = {status.batch: status for status in batch_status(db, [row.id for row in page])}
    data = [_object(settings, db, row, figures.get(row.id)) for row in page]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(rows) > limit,
    }


def cancel(settings: Settings, db: sa.Engine, owner: str, batch_id: str) -> dict:
    """Cancel: queued documents end cancelled at once, running ones finish."""
    found = retrieve(settings, db, owner, batch_id)
    if found["status"] in ("completed", "failed", "expired", "cancelled"):
        raise Refused(
            400,
            f"Batch {batch_id} is {found['status']}: only a batch still running can be cancelled.",
        )
    with db.begin() as conn:
        conn.execute(
            api_batches.update()
            .where(api_batches.c.id == batch_id, api_batches.c.cancelling_at.is_(None))
            .values(cancelling_at=utcnow())
        )
    if found["status"] != "validating":
        jobs_batches.cancel(db, batch_id, keep_texts=settings.keep_texts)
    return retrieve(settings, db, owner, batch_id)


def _seconds(moment: datetime | None) -> int | None:
    return int(moment.timestamp()) if moment else None


def _object(settings: Settings, db: sa.Engine, row, status: BatchStatus | None) -> dict:
    """OpenAI's batch object, from the API's row and the batch's figures (None: the batch
    has no rows yet)."""
    state = _state(row, status)
    if state in ("completed", "expired", "cancelled") and row.output_file_id is None:
        row = _finish(settings, db, row.id)
    counts = status.request_counts if status else {"total": 0, "completed": 0, "failed": 0}
    ended = (
        status.completed_at if status and state in ("completed", "expired", "cancelled") else None
    )
    expires = status.settings["expires_at"] if status else None
    return {
        "id": row.id,
        "object": "batch",
        "endpoint": row.endpoint,
        "model": status.model if status else None,
        "errors": {"object": "list", "data": json.loads(row.errors)} if row.errors else None,
        "input_file_id": row.input_file_id,
        "completion_window": row.completion_window,
        "status": state,
        "output_file_id": row.output_file_id,
        "error_file_id": row.error_file_id,
        "created_at": _seconds(row.created_at),
        "in_progress_at": _seconds(row.in_progress_at),
        "expires_at": _seconds(expires),
        "finalizing_at": _seconds(ended),
        "completed_at": _seconds(ended) if state == "completed" else None,
        "failed_at": _seconds(row.failed_at),
        "expired_at": _seconds(ended) if state == "expired" else None,
        "cancelling_at": _seconds(row.cancelling_at),
        "cancelled_at": _seconds(ended) if state == "cancelled" else None,
        "request_counts": {
            "total": counts["total"],
            "completed": counts["completed"],
            "failed": counts["total"] - counts["completed"] - (status.pending if status else 0),
        },
        "usage": _usage(status),
        "metadata": json.loads(row.metadata) if row.metadata else None,
    }


def _state(row, status: BatchStatus | None) -> str:
    if row.failed_at is not None:
        return "failed"
    if row.in_progress_at is None or status is None:
        return "validating"
    if status.pending:
        return "cancelling" if row.cancelling_at else "in_progress"
    if row.cancelling_at:
        return "cancelled"
    return "expired" if status.by_status[Status.EXPIRED] else "completed"


def _usage(status: BatchStatus | None) -> dict:
    prompt = status.prompt_tokens if status else 0
    completion = status.completion_tokens if status else 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": status.cached_tokens if status else 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def _finish(settings: Settings, db: sa.Engine, batch_id: str):
    """Write an ended batch's output and error files, once; its row with their ids."""
    with _finishing:
        with db.connect() as conn:
            row = conn.execute(sa.select(api_batches).where(api_batches.c.id == batch_id)).one()
        if row.output_file_id is not None:
            return row
        made = {}
        for column, statuses, suffix in (
            ("output_file_id", Status.SUCCEEDED, "output"),
            ("error_file_id", (Status.FAILED, *export.ENDED), "errors"),
        ):
            file_id = new_id()
            path = path_of(settings, file_id)
            with path.open("w", encoding="utf-8") as out:
                export.write(export.rows(db, batch_id, statuses), out, "openai")
            made[column] = file_id
            with db.begin() as conn:
                conn.execute(
                    stored_files.insert().values(
                        id=file_id,
                        owner=row.owner,
                        filename=f"{batch_id}_{suffix}.jsonl",
                        purpose="batch_output",
                        bytes=path.stat().st_size,
                        created_at=utcnow(),
                    )
                )
        with db.begin() as conn:
            conn.execute(api_batches.update().where(api_batches.c.id == batch_id).values(**made))
            return conn.execute(sa.select(api_batches).where(api_batches.c.id == batch_id)).one()
