"""The worker's writes to `results`: claiming documents, and recording outcomes in one transaction.

Writes are keyed by `result_key` and only touch rows that are still queued or
running, so a message delivered twice changes nothing the second time.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa

from jobs.database import retrying
from jobs.models import batches, documents, is_pending, lease_lapsed, results, utcnow
from jobs.retention import drop_texts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claim:
    """A document the worker took on: its text, prompt, and how many times it has been tried."""

    key: str
    content_hash: str
    body: str
    model: str
    instruction: str
    max_tokens: int
    attempts: int


@dataclass(frozen=True)
class Outcome:
    """What became of one document, as written to its rows."""

    key: str
    status: str  # "succeeded", "failed", "queued" (to be tried again), "skipped", "handback"
    summary: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    parts: int | None = None
    finish_reason: str | None = None
    error: str | None = None
    retry_in_s: float | None = None  # with status "queued": when to try again


TEXT_GONE = (
    "the document's text is no longer stored (it was dropped after an earlier summary): "
    "submit the file again under a new batch name"
)


class Recorder:
    def __init__(
        self,
        engine: sa.Engine,
        retry_s: float = 300.0,
        *,
        keep_texts: bool = False,
        lease_s: float = 60.0,
        worker: str | None = None,
    ):
        self.db = engine
        self.keep_texts = keep_texts  # SUMMARIZE_KEEP_TEXTS: never `forget` a text
        self.lease_s = lease_s  # how long a claim holds a row unless renewed
        self.worker = worker or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self._retry = retrying(retry_s)

    def _free(self, now) -> sa.ColumnElement:
        """Rows this worker may take: queued, or running under a lease that ran out (or ours)."""
        free = sa.or_(lease_lapsed(now), results.c.claimed_by == self.worker)
        return sa.or_(results.c.status == "queued", sa.and_(results.c.status == "running", free))

    def renew(self, keys: list[str]) -> None:
        """Extend this worker's lease on the rows it is running (once: the next renewal is a
        quarter of a lease away, so a database that is away is not waited for)."""
        if not keys:
            return
        until = utcnow() + timedelta(seconds=self.lease_s)
        with self.db.begin() as conn:
            conn.execute(
                results.update()
                .where(
                    results.c.result_key.in_(keys),
                    results.c.status == "running",
                    results.c.claimed_by == self.worker,
                )
                .values(lease_until=until)
            )

    def forget(self, hashes: list[str]) -> int:
        """Drop the texts of these documents that no row needs any more (jobs/retention.py)."""
        if self.keep_texts or not hashes:
            return 0
        return self._retry(self._forget)(hashes)

    def _forget(self, hashes: list[str]) -> int:
        with self.db.begin() as conn:
            return drop_texts(conn, hashes)

    def attempts(self, keys: list[str]) -> dict[str, int]:
        """How many times each key's pending rows were taken on before (keys with none: absent)."""
        return self._retry(self._attempts)(keys)

    def _attempts(self, keys: list[str]) -> dict[str, int]:
        if not keys:
            return {}
        with self.db.connect() as conn:
            return dict(
                conn.execute(
                    sa.select(results.c.result_key, sa.func.max(results.c.attempts))
                    .where(results.c.result_key.in_(keys), is_pending)
                    .group_by(results.c.result_key)
                ).all()
            )

    def release(self, keys: list[str], *, claimed: bool = True) -> None:
        """Give documents back unfinished: queued again.

        For documents this worker claimed, the attempt does not count. Documents it held but
        never claimed may still show `running` from a worker that died with them.
        """
        self._retry(self._release)(keys, claimed)

    def _release(self, keys: list[str], claimed: bool) -> None:
        if not keys:
            return
        values = {"status": "queued", "started_at": None, "claimed_by": None, "lease_until": None}
        if claimed:
            values["attempts"] = results.c.attempts - 1
        with self.db.begin() as conn:  # never a row another worker holds under a live lease
            conn.execute(
                results.update()
                .where(
                    results.c.result_key.in_(keys),
                    results.c.status == "running",
                    self._free(utcnow()),
                )
                .values(**values)
            )

    def claim(self, keys: list[str]) -> dict[str, Claim]:
        """Mark the keys' pending rows running (one more attempt); returns those that had any."""
        return self._retry(self._claim)(keys)

    def _claim(self, keys: list[str]) -> dict[str, Claim]:
        if not keys:
            return {}
        now = utcnow()
        with self.db.begin() as conn:
            conn.execute(
                results.update()
                .where(results.c.result_key.in_(keys), is_pending, self._free(now))
                .values(
                    status="running",
                    attempts=results.c.attempts + 1,
                    started_at=now,
                    claimed_by=self.worker,
                    lease_until=now + timedelta(seconds=self.lease_s),
                )
            )
            rows = conn.execute(
                sa.select(
                    results.c.result_key,
                    sa.func.max(results.c.attempts).label("attempts"),
                    sa.func.min(results.c.batch).label("batch"),
                    sa.func.min(results.c.content_hash).label("content_hash"),
                )
                .where(
                    results.c.result_key.in_(keys),
                    results.c.status == "running",
                    results.c.claimed_by == self.worker,
                )
                .group_by(results.c.result_key)
            ).all()
            if not rows:
                return {}
            bodies = dict(
                conn.execute(
                    sa.select(documents.c.content_hash, documents.c.body).where(
                        documents.c.content_hash.in_({r.content_hash for r in rows})
                    )
                ).all()
            )
            prompts = {
                b.name: b
                for b in conn.execute(
                    sa.select(batches).where(batches.c.name.in_({r.batch for r in rows}))
                )
            }
            gone = [r.result_key for r in rows if bodies.get(r.content_hash) is None]
            if gone:  # only hand-written SQL gets here: a pending row keeps its text
                conn.execute(
                    results.update()
                    .where(results.c.result_key.in_(gone), results.c.status == "running")
                    .values(status="failed", error=TEXT_GONE, finished_at=now)
                )
                rows = [r for r in rows if r.result_key not in gone]
        return {
            r.result_key: Claim(
                key=r.result_key,
                content_hash=r.content_hash,
                body=bodies[r.content_hash],
                model=prompts[r.batch].model,
                instruction=prompts[r.batch].instruction,
                max_tokens=prompts[r.batch].max_tokens,
                attempts=r.attempts,
            )
            for r in rows
        }

    def record(self, outcomes: list[Outcome]) -> None:
        """Write every outcome in one transaction (retrying a database that went away)."""
        if outcomes:
            self._retry(self._record)(outcomes)

    def _record(self, outcomes: list[Outcome]) -> None:
        now = utcnow()
        finals = [o for o in outcomes if o.status != "queued"]
        again = [o for o in outcomes if o.status == "queued"]
        with self.db.begin() as conn:
            if finals and conn.dialect.name == "postgresql":
                conn.execute(_finals_in_one_statement(finals, now))
            elif finals:  # SQLite: one statement per row is as fast, and needs no UPDATE FROM
                conn.execute(
                    results.update()
                    .where(
                        results.c.result_key == sa.bindparam("k"),
                        is_pending,
                    )
                    .values(
                        status=sa.bindparam("s"),
                        summary=sa.bindparam("v_summary"),
                        prompt_tokens=sa.bindparam("v_prompt_tokens"),
                        completion_tokens=sa.bindparam("v_completion_tokens"),
                        cached_tokens=sa.bindparam("v_cached_tokens"),
                        parts=sa.bindparam("v_parts"),
                        finish_reason=sa.bindparam("v_finish_reason"),
                        error=sa.bindparam("v_error"),
                        finished_at=now,
                    ),
                    [_params(o) for o in finals],
                )
            if again:
                conn.execute(
                    results.update()
                    .where(
                        results.c.result_key == sa.bindparam("k"),
                        is_pending,
                    )
                    .values(status="queued", error=sa.bindparam("v_error")),
                    [{"k": o.key, "v_error": o.error} for o in again],
                )


_WRITTEN = {  # the columns an outcome writes, with their types (VALUES needs them spelled out)
    "status": sa.String(16),
    "summary": sa.Text(),
    "prompt_tokens": sa.Integer(),
    "completion_tokens": sa.Integer(),
    "cached_tokens": sa.Integer(),
    "parts": sa.Integer(),
    "finish_reason": sa.String(16),
    "error": sa.Text(),
}


def _finals_in_one_statement(finals: list[Outcome], now) -> sa.Update:
    """UPDATE … FROM (VALUES …): on PostgreSQL, one statement fires the rollup triggers once."""
    written = sa.values(
        sa.column("k", sa.String(64)),
        *(sa.column(name, kind) for name, kind in _WRITTEN.items()),
        name="written",
    ).data([(o.key, *(getattr(o, name) for name in _WRITTEN)) for o in finals])
    return (
        results.update()
        .where(results.c.result_key == written.c.k, is_pending)
        .values(
            {name: sa.cast(written.c[name], kind) for name, kind in _WRITTEN.items()}
            | {"finished_at": now}
        )
    )


def _params(o: Outcome) -> dict:
    return {
        "k": o.key,
        "s": o.status,
        "v_summary": o.summary,
        "v_prompt_tokens": o.prompt_tokens,
        "v_completion_tokens": o.completion_tokens,
        "v_cached_tokens": o.cached_tokens,
        "v_parts": o.parts,
        "v_finish_reason": o.finish_reason,
        "v_error": o.error,
    }
