"""The worker's writes to `results`: claiming documents, and recording outcomes in one transaction.

Writes are keyed by `result_key` and only touch rows that are still queued or
running, so a message delivered twice changes nothing the second time.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY

from core.database import Prepared, one_of, retrying
from core.prompt import SummarySpec
from core.retention import drop_texts
from core.tables import (
    GENERATED_COLUMNS,
    Status,
    batches,
    documents,
    is_pending,
    lease_lapsed,
    prompts,
    results,
    utcnow,
)
from worker.work import Claim, Outcome

log = logging.getLogger(__name__)


class _Taken(NamedTuple):
    """A claimed row's facts the claim is made from (the newest attempt of its key)."""

    attempts: int
    model: str
    prompt_hash: str
    content_hash: str


PROMPTS_KEPT = 10_000  # specs of `prompts` rows a worker keeps in memory (claims read them)

TEXT_GONE = (
    "the document's text is no longer stored (it was dropped after an earlier summary): "
    "submit the file again under a new batch name"
)


class Recorder:
    def __init__(
        self,
        db: sa.Engine,
        retry_s: float = 300.0,
        *,
        keep_texts: bool = False,
        lease_s: float = 60.0,
        worker: str | None = None,
    ):
        self.db = db
        self.on_recorded: Callable[[list[Outcome]], None] | None = None  # worker/metrics.py
        self.keep_texts = keep_texts  # SUMMARIZE_KEEP_TEXTS: never drop a text
        self.lease_s = lease_s  # how long a claim holds a row unless renewed
        self.worker = worker or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self._retry = retrying(retry_s)
        self._specs: dict[str, SummarySpec] = {}  # prompt_hash -> its spec (_specs_of)
        # SQLite lets one writer in at a time and makes the others poll for the lock with
        # growing sleeps; our threads (claims, writes, leases) queue here instead, each woken
        # the moment the one before commits.
        self._one_writer = (
            threading.Lock() if db.dialect.name == "sqlite" else contextlib.nullcontext()
        )

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sa.Connection]:
        with self._one_writer, self.db.begin() as conn:
            yield conn

    def renew(self, keys: list[str]) -> None:
        """Extend this worker's lease on the rows it is running (once: the next renewal is a
        quarter of a lease away, so a database that is away is not waited for)."""
        if not keys:
            return
        until = utcnow() + timedelta(seconds=self.lease_s)
        with self._transaction() as conn:
            conn.execute(
                results.update()
                .where(
                    results.c.result_key.in_(keys),
                    results.c.status == Status.RUNNING,
                    results.c.claimed_by == self.worker,
                )
                .values(lease_until=until)
            )

    def drop_texts(self, hashes: list[str]) -> int:
        """Drop the texts of these documents that no row needs any more (core/retention.py)."""
        if self.keep_texts or not hashes:
            return 0
        return self._retry(self._drop_texts)(hashes)

    def _drop_texts(self, hashes: list[str]) -> int:
        with self._transaction() as conn:
            return drop_texts(conn, hashes)

    def release(self, keys: list[str], *, claimed: bool = True) -> None:
        """Give documents back unfinished: queued again.

        For documents this worker claimed, the attempt does not count. Documents it held but
        never claimed may still show `running` from a worker that died with them.
        """
        self._retry(self._release)(keys, claimed)

    def _release(self, keys: list[str], claimed: bool) -> None:
        if not keys:
            return
        values = {
            "status": Status.QUEUED,
            "started_at": None,
            "claimed_by": None,
            "lease_until": None,
        }
        if claimed:
            values["attempts"] = results.c.attempts - 1
        with self._transaction() as conn:  # never a row another worker holds under a live lease
            conn.execute(
                results.update()
                .where(
                    results.c.result_key.in_(keys),
                    results.c.status == Status.RUNNING,
                    _free(utcnow(), self.worker),
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
        with self._transaction() as conn:
            claiming, reading = _claiming(conn.dialect)
            taken: dict[str, _Taken] = {}
            for key, *row in claiming.execute(
                conn,
                keys=keys,
                now=now,
                until=now + timedelta(seconds=self.lease_s),
                worker=self.worker,
            ):
                found, seen = _Taken(*row), taken.get(key)  # a key in several batches: one
                if seen is None or found.attempts > seen.attempts:  # document, its newest try
                    taken[key] = found
            if not taken:
                return {}
            hashes = list({t.content_hash for t in taken.values()})
            bodies = dict(reading.execute(conn, hashes=hashes).all())
            specs = self._specs_of(conn, {t.prompt_hash for t in taken.values()})
            gone = [key for key, t in taken.items() if bodies.get(t.content_hash) is None]
            if gone:  # only hand-written SQL gets here: a pending row keeps its text
                conn.execute(
                    results.update()
                    .where(results.c.result_key.in_(gone), results.c.status == Status.RUNNING)
                    .values(status=Status.FAILED, error=TEXT_GONE, finished_at=now)
                )
                for key in gone:
                    del taken[key]
        claims = {}
        for key, t in taken.items():
            claims[key] = Claim(
                key=key,
                content_hash=t.content_hash,
                body=bodies[t.content_hash],
                model=t.model,
                spec=specs[t.prompt_hash],
                attempts=t.attempts,
            )
        return claims

    def _specs_of(self, conn: sa.Connection, hashes: set[str]) -> dict[str, SummarySpec]:
        """The specs the `prompts` rows of these hashes store. A hash names its spec for good,
        so specs read once are kept (a batch's documents share one) and only new hashes are
        read."""
        unknown = hashes - self._specs.keys()
        if unknown:
            if len(self._specs) + len(unknown) > PROMPTS_KEPT:
                self._specs.clear()  # each request of an OpenAI file may bring its own
                unknown = hashes
            rows = conn.execute(sa.select(prompts).where(prompts.c.prompt_hash.in_(unknown)))
            self._specs.update((row.prompt_hash, SummarySpec.of_row(row)) for row in rows)
        return self._specs

    def record(self, outcomes: list[Outcome]) -> None:
        """Write every outcome in one transaction (retrying a database that went away)."""
        if outcomes:
            self._retry(self._record)(outcomes)
            if self.on_recorded is not None:
                self.on_recorded(outcomes)

    def _record(self, outcomes: list[Outcome]) -> None:
        now = utcnow()
        finals = [o for o in outcomes if o.status != Status.QUEUED]
        again = [o for o in outcomes if o.status == Status.QUEUED]
        with self._transaction() as conn:
            if finals and conn.dialect.name == "postgresql":
                columns = {name: [getattr(o, name) for o in finals] for name in _WRITTEN}
                conn.exec_driver_sql(
                    _finals_at_once(conn.dialect),
                    {"key": [o.key for o in finals], "finished_at": now} | columns,
                )
            elif finals:  # SQLite: triggers run per row anyway; the driver runs one per row
                sql, parameters = _each_final(conn.dialect)
                conn.exec_driver_sql(sql, parameters(finals, now))
            if again:
                conn.execute(
                    results.update()
                    .where(
                        results.c.result_key == sa.bindparam("k"),
                        is_pending,
                    )
                    .values(status=Status.QUEUED, error=sa.bindparam("v_error")),
                    [{"k": o.key, "v_error": o.error} for o in again],
                )


def _free(now, worker) -> sa.ColumnElement[bool]:
    """Rows `worker` may take: queued, or running under a lease that ran out (or its own)."""
    free = sa.or_(lease_lapsed(now), results.c.claimed_by == worker)
    return sa.or_(
        results.c.status == Status.QUEUED, sa.and_(results.c.status == Status.RUNNING, free)
    )


@functools.cache
def _claiming(dialect: sa.Dialect) -> tuple[Prepared, Prepared]:
    """A claim's two statements, compiled once: mark the pending rows of `keys` running for
    `worker` from `now` until `until`, returning each row's attempts, model, prompt and text
    hashes; and read the texts of `hashes`. A row whose batch has expired is never started:
    the sweep ends it as expired (core/requeue.expire_overdue)."""
    now = sa.bindparam("now", type_=results.c.started_at.type)
    worker = sa.bindparam("worker", type_=results.c.claimed_by.type)
    expired = sa.exists().where(batches.c.name == results.c.batch, batches.c.expires_at < now)
    claiming = (
        results.update()
        .where(
            one_of(results.c.result_key, "keys", dialect),
            is_pending,
            _free(now, worker),
            ~expired,
        )
        .values(
            status=Status.RUNNING,
            attempts=results.c.attempts + 1,
            started_at=now,
            claimed_by=worker,
            lease_until=sa.bindparam("until", type_=results.c.lease_until.type),
        )
        .returning(*(results.c[name] for name in ("result_key", *_Taken._fields)))
    )
    reading = sa.select(documents.c.content_hash, documents.c.body).where(
        one_of(documents.c.content_hash, "hashes", dialect)
    )
    return Prepared.of(claiming, dialect), Prepared.of(reading, dialect)


_WRITTEN = {  # the columns an outcome writes, in the table's order, with their types
    column.name: column.type
    for column in results.columns
    if column.name in ("status", *GENERATED_COLUMNS, "error")
}


@functools.cache
def _finals_at_once(dialect: sa.Dialect) -> str:
    """PostgreSQL: UPDATE … FROM unnest(one array a column), compiled once. One statement fires
    the statement-level rollup triggers once a wave, and its text never changes, so neither
    SQLAlchemy nor the server plans it again (a VALUES list of the wave's rows cost SQLAlchemy
    a compilation a row). Its parameters: `key` and each `_WRITTEN` column, as lists, and
    `finished_at`."""
    arrays = [sa.cast(sa.bindparam("key"), ARRAY(sa.String(64)))]
    arrays += [sa.cast(sa.bindparam(name), ARRAY(kind)) for name, kind in _WRITTEN.items()]
    written = sa.func.unnest(*arrays).table_valued("key", *_WRITTEN).render_derived(name="written")
    return str(
        results.update()
        .where(results.c.result_key == written.c.key, is_pending)
        .values(
            {name: written.c[name] for name in _WRITTEN}
            | {"finished_at": sa.bindparam("finished_at", type_=results.c.finished_at.type)}
        )
        .compile(dialect=dialect)
    )


@functools.cache
def _each_final(dialect: sa.Dialect) -> tuple[str, Callable]:
    """One row's UPDATE, compiled once, and how to make its parameters from an outcome and the
    time: the driver's executemany runs it for a wave with no per-row work in SQLAlchemy (a
    third of a write's cost)."""
    compiled = (
        results.update()
        .where(results.c.result_key == sa.bindparam("key"), is_pending)
        .values(
            {name: sa.bindparam(name, type_=kind) for name, kind in _WRITTEN.items()}
            | {"finished_at": sa.bindparam("finished_at", type_=results.c.finished_at.type)}
        )
        .compile(dialect=dialect)
    )
    order = list(compiled.positiontup)  # the outcome's fields, `finished_at` among them
    at = order.index("finished_at")
    fields = operator.attrgetter(*(name for name in order if name != "finished_at"))
    kind = results.c.finished_at.type.dialect_impl(dialect)
    stamp = kind.bind_processor(dialect) or (lambda value: value)

    def parameters(outcomes: list[Outcome], finished_at) -> list[tuple]:
        when = stamp(finished_at)
        made = []
        for outcome in outcomes:
            row = fields(outcome)
            made.append((*row[:at], when, *row[at:]))
        return made

    return compiled.string, parameters
