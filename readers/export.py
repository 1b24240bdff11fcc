"""A batch's rows out: `summarize results` as JSON lines or CSV.

Rows stream from a server-side cursor in pages, so exporting a million rows
costs no more memory than exporting a hundred.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from datetime import datetime
from typing import TextIO

import sqlalchemy as sa

from core.tables import batches, results

PAGE_ROWS = 1000
EXPORTED = [c.name for c in results.columns]


def exists(db: sa.Engine, batch: str) -> bool:
    with db.connect() as conn:
        return (
            conn.execute(sa.select(batches.c.name).where(batches.c.name == batch)).first()
            is not None
        )


def rows(db: sa.Engine, batch: str | None = None, status: str | None = None) -> Iterator[dict]:
    """Every matching row of `results`, in id order, fetched a page at a time."""
    query = sa.select(results).order_by(results.c.id)
    if batch is not None:
        query = query.where(results.c.batch == batch)
    if status is not None:
        query = query.where(results.c.status == status)
    with db.connect() as conn:
        streamed = conn.execution_options(stream_results=True, yield_per=PAGE_ROWS)
        for row in streamed.execute(query):
            yield dict(row._mapping)


def write(rows_: Iterator[dict], out: TextIO, fmt: str) -> int:
    """Write rows as JSON lines or CSV (with a header); returns how many."""
    count = 0
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=EXPORTED, lineterminator="\n")
        writer.writeheader()
        for row in rows_:
            writer.writerow({k: _cell(_plain(v)) for k, v in row.items()})
            count += 1
    else:
        for row in rows_:
            out.write(json.dumps({k: _plain(v) for k, v in row.items()}, ensure_ascii=False))
            out.write("\n")
            count += 1
    return count


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(value):
    """A CSV cell a spreadsheet will not run: text starting like a formula gets a leading `'`
    (OWASP's advice on CSV injection)."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _plain(value):
    """Datetimes as ISO 8601; the csv module writes None as an empty field by itself."""
    return value.isoformat() if isinstance(value, datetime) else value
