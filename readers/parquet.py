"""A batch's rows out as Parquet: `summarize results --format parquet`.

Every column of `results` with its type: whole numbers as 64-bit integers, the quality
signals as doubles, flags as booleans, times as UTC timestamps (microseconds), texts as
strings (`metadata` as its JSON text). Rows are written GROUP_ROWS at a time, each a row
group, so exporting a million rows costs no more memory than exporting ten thousand.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import sqlalchemy as sa

from core.tables import results
from readers.views import as_utc

GROUP_ROWS = 10_000


def schema():
    """The Parquet schema of `results`, from the table's own column types."""
    import pyarrow as pa

    def arrow(column: sa.Column):
        if isinstance(column.type, sa.Boolean):
            return pa.bool_()
        if isinstance(column.type, sa.Integer):  # BigInteger too
            return pa.int64()
        if isinstance(column.type, sa.Float):
            return pa.float64()
        if isinstance(column.type, sa.DateTime):
            return pa.timestamp("us", tz="UTC")
        return pa.string()

    return pa.schema([pa.field(c.name, arrow(c)) for c in results.columns])


def write(rows: Iterator[dict], out: BinaryIO) -> int:
    """Write rows to `out` as one Parquet file; returns how many."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pa.set_memory_pool(pa.system_memory_pool())  # hands written groups' memory back
    shape = schema()
    times = [f.name for f in shape if pa.types.is_timestamp(f.type)]
    count = 0
    with pq.ParquetWriter(out, shape, compression="zstd") as writer:
        group: list[dict] = []
        for row in rows:
            for name in times:
                row[name] = as_utc(row[name])
            group.append(row)
            if len(group) >= GROUP_ROWS:
                writer.write_batch(pa.RecordBatch.from_pylist(group, schema=shape))
                count, group = count + len(group), []
        if group or not count:  # an empty export is a file with the schema and no rows
            writer.write_batch(pa.RecordBatch.from_pylist(group, schema=shape))
            count += len(group)
    return count
