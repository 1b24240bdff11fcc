"""Parquet files: each row a document, read a batch of rows at a time.

The text is in one column (`--text-field`, default `text`) and the id in another
(`--id-field`, default `id`); every other column is kept as the document's metadata, a JSON
object whose values keep their types (numbers, booleans, lists, nested records; a timestamp
or a date as its ISO text). The file is read with pyarrow a batch of rows at a time, so one
of ten million rows needs no more memory than one of ten thousand; a row group whose
columns would decode to more than MAX_GROUP_DOCS documents' worth of bytes fails as one
row, unread. Each row's source path is `FILE:ROW` (rows counted from 1), so submitting the
file again finds the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator

from core.errors import described
from jobs.documents import Text, Unreadable, record_text
from jobs.fields import Fields
from jobs.folders import Found

BATCH_ROWS = 1024  # rows decoded at a time
MAX_GROUP_DOCS = 64  # a row group may hold this many SUMMARIZE_MAX_DOC_BYTES, uncompressed


def read(found: Found, max_bytes: int, fields: Fields) -> Iterator[Text | Unreadable]:
    """Every row of a `.parquet` file, as a Text or an Unreadable, in file order."""
    path = found.path
    handle = found.open()
    if isinstance(handle, Unreadable):
        yield handle
        return
    with handle:
        table = _opened(handle, path)
        if isinstance(table, Unreadable):
            yield table
            return
        names = table.schema_arrow.names
        named = fields.chosen(names)
        if named is None:
            yield Unreadable(
                path,
                f"no column {fields.texts} (columns: {', '.join(map(repr, names[:20]))}): name "
                "the column that holds the text with --text-field (FILE=NAME for this file alone)",
            )
            return
        yield from _rows(table, path, max_bytes, named)


def estimate(found: Found) -> int:
    """How many rows a file holds, from its footer; 1 when it cannot be read (one row)."""
    handle = found.open()
    if isinstance(handle, Unreadable):
        return 1
    with handle:
        table = _opened(handle, found.path)
        return 1 if isinstance(table, Unreadable) else max(1, table.metadata.num_rows)


def _opened(handle, path: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    # The C library's allocator hands freed batches back; pyarrow's own (mimalloc) keeps them:
    # with it, a submit of a 200,000-row file peaked 40 MB higher.
    pa.set_memory_pool(pa.system_memory_pool())

    try:
        return pq.ParquetFile(handle)
    except Exception as exc:  # noqa: BLE001 - whatever a damaged footer raises
        return Unreadable(path, f"not a Parquet file that can be read ({described(exc)})")


def _rows(table, path: str, max_bytes: int, named: Fields) -> Iterator[Text | Unreadable]:
    (text,), (id_field,) = named.text, named.id
    number = 0
    for group in range(table.num_row_groups):
        meta = table.metadata.row_group(group)
        first, rows = number + 1, meta.num_rows
        number += rows
        if meta.total_byte_size > MAX_GROUP_DOCS * max_bytes:
            yield Unreadable(
                f"{path}:{first}",
                f"rows {first:,} to {number:,}: a row group of {meta.total_byte_size:,} bytes "
                f"uncompressed, more than {MAX_GROUP_DOCS} times SUMMARIZE_MAX_DOC_BYTES: "
                "write the file in smaller row groups",
            )
            continue
        row = first - 1
        try:
            for batch in table.iter_batches(
                batch_size=BATCH_ROWS, row_groups=[group], use_threads=False
            ):
                for record in batch.to_pylist():
                    row += 1
                    yield _document(record, f"{path}:{row}", row, max_bytes, text, id_field)
        except Exception as exc:  # noqa: BLE001 - a damaged row group: its rows fail, the rest go on
            yield Unreadable(
                f"{path}:{row + 1}",
                f"rows {row + 1:,} to {number:,}: cannot be read ({described(exc)})",
            )


def _document(record: dict, where: str, row: int, max_bytes: int, text: str, id_field: str):
    doc_id = record.get(id_field)
    if doc_id is not None and (not isinstance(doc_id, str | int) or isinstance(doc_id, bool)):
        return Unreadable(where, f"row {row}: the id column {id_field!r} is not text or a number")
    rest = {k: v for k, v in record.items() if k not in (text, id_field)}
    value = record.get(text)
    return record_text(
        where,
        "" if value is None else value,  # a null cell: an empty text
        row,
        max_bytes,
        text,
        doc_id=str(doc_id) if doc_id not in (None, "") else None,
        metadata=rest or None,
        unit="row",
    )
