"""Parquet files: each row a document with its id and the other columns as metadata, read a
batch of rows at a time; a bad row, row group or file is a failed document naming where, and
the rest goes on."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from core.tables import results
from jobs import folders, parquet
from jobs.documents import Text, Unreadable
from jobs.fields import DEFAULT_FIELDS, Fields
from jobs.submit import count_documents
from tests.fakes import FakeEngine
from tests.helpers import all_rows, run, summarize_one, summary_line

WAIT_S = 30

MAX = 10_000


def read(path, fields=DEFAULT_FIELDS, max_bytes=MAX):
    return list(parquet.read(folders.Found(str(path), "document"), max_bytes, fields))


def _said(found: Text | Unreadable) -> str:
    return found.body if isinstance(found, Text) else found.reason


def table_file(path, columns: dict, **options):
    pq.write_table(pa.table(columns), path, **options)
    return path


def test_each_row_is_a_document_with_its_id_and_its_other_columns_as_typed_metadata(tmp_path):
    path = table_file(
        tmp_path / "news.parquet",
        {
            "id": ["n1", "n2"],
            "text": ["The bridge reopens.", "Café prices rise."],
            "words": [3, 3],
            "score": [0.5, None],
            "wire": [True, False],
            "tags": [["a", "b"], []],
            "published": [dt.datetime(2026, 12, 3, 9, 30), dt.datetime(2026, 12, 4)],
        },
    )

    found = read(path)

    assert [(t.path.rsplit("/", 1)[-1], t.doc_id, t.body) for t in found] == [
        ("news.parquet:1", "n1", "The bridge reopens."),
        ("news.parquet:2", "n2", "Café prices rise."),
    ]
    assert json.loads(found[0].metadata) == {
        "words": 3,
        "score": 0.5,
        "wire": True,
        "tags": ["a", "b"],
        "published": "2026-12-03T09:30:00",
    }
    assert all(isinstance(t, Text) and t.file == str(path) for t in found)


def test_a_bad_row_is_a_failed_document_naming_its_row_and_the_rest_goes_on(tmp_path):
    path = table_file(
        tmp_path / "rows.parquet",
        {"id": [1, 2, 3, 4], "text": ["First.", None, "   ", "Fourth."]},
        row_group_size=2,
    )

    found = read(path)

    assert [(r.path.rsplit("/", 1)[-1], _said(r)) for r in found] == [
        ("rows.parquet:1", "First."),
        ("rows.parquet:2", "row 2: empty text: nothing to summarize"),
        ("rows.parquet:3", "row 3: empty text: nothing to summarize"),
        ("rows.parquet:4", "Fourth."),
    ]


def test_the_text_column_is_chosen_with_text_field_and_a_missing_one_says_how(tmp_path):
    path = table_file(tmp_path / "t.parquet", {"ticket": ["T-1"], "body": ["Printer on fire."]})

    (missing,) = read(path)
    (found,) = read(path, Fields(("body",), ("ticket",)))

    assert isinstance(missing, Unreadable)
    assert missing.reason == (
        "no column 'text' (columns: 'ticket', 'body'): name the column that holds the text "
        "with --text-field (FILE=NAME for this file alone)"
    )
    assert (found.doc_id, found.body, found.metadata) == ("T-1", "Printer on fire.", None)


def test_a_file_that_is_not_parquet_is_one_failed_document(tmp_path):
    path = tmp_path / "fake.parquet"
    path.write_bytes(b"PAR1 this is not a parquet file at all")

    (found,) = read(path)

    assert isinstance(found, Unreadable)
    assert found.reason.startswith("not a Parquet file that can be read (")


def test_a_row_group_too_large_to_decode_fails_as_one_row_and_the_next_groups_are_read(
    tmp_path,
):
    big = "word " * 400  # 2,000 bytes a row
    path = table_file(
        tmp_path / "groups.parquet",
        {"text": [big, big, "Short one.", "Short two."]},
        row_group_size=2,
        compression="none",
    )

    found = read(path, max_bytes=60)  # a group may hold 64 x 60 bytes

    assert isinstance(found[0], Unreadable)
    assert found[0].path.endswith("groups.parquet:1")
    assert found[0].reason.startswith("rows 1 to 2: a row group of ")
    assert [t.body for t in found[1:]] == ["Short one.", "Short two."]


def test_the_progress_bar_counts_rows_from_the_footer(tmp_path):
    table_file(tmp_path / "a.parquet", {"text": [f"Row {i}." for i in range(2500)]})

    assert count_documents([str(tmp_path)]) == 2500


def test_submit_queues_each_row_and_a_second_submit_finds_the_same_rows(env, db, tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    table_file(folder / "news.parquet", {"id": ["a", "b"], "text": ["One.", "Two."]})

    first = run(env, "submit", str(folder), "--batch", "p")
    again = run(env, "submit", str(folder), "--batch", "p")

    assert first.exit_code == 0, first.output
    assert summary_line(first.output, "queued") == 2
    assert summary_line(again.output, "already in batch") == 2
    assert sorted((r.doc_id, r.status) for r in all_rows(db, "p")) == [
        ("a", "queued"),
        ("b", "queued"),
    ]


# -- results out -------------------------------------------------------------------------------


def summarized(env, db, tmp_path, run_drain) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    table_file(folder / "news.parquet", {"id": ["a", "b"], "text": ["One.", "Two."], "n": [1, 2]})
    assert run(env, "submit", str(folder), "--batch", "p").exit_code == 0
    drain = run_drain(FakeEngine())
    with db.connect() as conn:
        keys = set(conn.execute(sa.select(results.c.result_key)).scalars())
    assert {summarize_one(drain, key).result(WAIT_S).status for key in keys} == {"succeeded"}


def test_results_as_parquet_have_every_column_with_its_type(env, db, tmp_path, run_drain):
    summarized(env, db, tmp_path, run_drain)
    out = tmp_path / "out" / "night.parquet"
    out.parent.mkdir()

    done = run(env, "results", "--batch", "p", "--format", "parquet", "--output", str(out))

    assert done.exit_code == 0, done.output
    table = pq.read_table(out)
    assert table.schema.names == [c.name for c in results.columns]
    types = {f.name: str(f.type) for f in table.schema}
    assert (types["prompt_tokens"], types["repetition"], types["deduplicated"]) == (
        "int64",
        "double",
        "bool",
    )
    assert types["created_at"] == types["finished_at"] == "timestamp[us, tz=UTC]"
    got = sorted(table.to_pylist(), key=lambda row: row["doc_id"])
    assert [(r["doc_id"], r["status"], r["summary"], r["metadata"]) for r in got] == [
        ("a", "succeeded", "summary of 26 tokens", '{"n":1}'),
        ("b", "succeeded", "summary of 26 tokens", '{"n":2}'),
    ]
    assert all(r["finished_at"].tzinfo is not None and r["completion_tokens"] == 4 for r in got)
    assert [p.name for p in out.parent.iterdir()] == ["night.parquet"]  # no temporary left


def test_an_export_that_fails_leaves_no_file_behind(env, db, tmp_path, run_drain, monkeypatch):
    summarized(env, db, tmp_path, run_drain)
    out = tmp_path / "out"
    out.mkdir()

    def broken(rows, handle):
        handle.write(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr("readers.parquet.write", broken)
    with pytest.raises(OSError, match="disk full"):
        run(env, "results", "--format", "parquet", "--output", str(out / "night.parquet"))

    assert list(out.iterdir()) == []


def test_output_takes_every_format_and_a_missing_folder_is_refused(env, db, tmp_path, run_drain):
    summarized(env, db, tmp_path, run_drain)
    printed = run(env, "results", "--batch", "p")

    written = run(env, "results", "--batch", "p", "--output", str(tmp_path / "p.jsonl"))
    nowhere = run(env, "results", "--output", str(tmp_path / "no" / "such" / "p.jsonl"))

    assert written.exit_code == 0 and written.output == ""
    assert (tmp_path / "p.jsonl").read_text() == printed.output
    assert nowhere.exit_code == 2
    assert "is not a folder: make it first" in nowhere.output
