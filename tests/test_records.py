"""Record files: each JSON line or CSV row is a document with its id and metadata; a bad record
is a failed document naming its line, and the rest of the file goes on."""

from __future__ import annotations

import json

from jobs import folders, records
from jobs.documents import Text, Unreadable
from jobs.fields import DEFAULT_FIELDS, Fields
from tests.helpers import write

MAX = 10_000


def read(path, fields=DEFAULT_FIELDS, max_bytes=MAX):
    return list(records.read(folders.Found(str(path), "document"), max_bytes, fields))


def jsonl(*lines) -> str:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)


def outcomes(found) -> list[tuple]:
    return [
        (r.path.rsplit("/", 1)[-1], "text", r.doc_id, r.body, r.metadata)
        if isinstance(r, Text)
        else (r.path.rsplit("/", 1)[-1], "failed", r.doc_id, r.reason)
        for r in found
    ]


def test_json_lines_give_a_document_per_record_with_its_id_and_other_fields(tmp_path):
    path = write(
        tmp_path,
        "news.jsonl",
        jsonl(
            {"id": "n1", "text": "The bridge reopens.", "source": "wire", "tags": ["a", "b"]},
            {"id": 7, "text": "Café prices rise."},
            {"text": "No id here."},
        ),
    )

    assert outcomes(read(path)) == [
        ("news.jsonl:1", "text", "n1", "The bridge reopens.", '{"source":"wire","tags":["a","b"]}'),
        ("news.jsonl:2", "text", "7", "Café prices rise.", None),
        ("news.jsonl:3", "text", None, "No id here.", None),
    ]


def test_bad_json_lines_are_failed_documents_that_name_the_line_and_the_rest_goes_on(tmp_path):
    path = write(
        tmp_path,
        "mixed.jsonl",
        jsonl(
            "{not json",
            [1, 2],
            {"id": "x", "body": "wrong field"},
            {"id": "e", "text": "   "},
            {"id": "n", "text": 42},
            {"id": {"deep": 1}, "text": "id is an object"},
            {"id": "z", "text": "nul \u0000 inside"},
            "",
            {"id": "ok", "text": "Fine at last."},
        ),
    )

    assert outcomes(read(path)) == [
        ("mixed.jsonl:1", "failed", None, "line 1: not JSON (Expecting property name enclosed in double quotes, column 2)"),
        ("mixed.jsonl:2", "failed", None, "line 2: not a JSON object"),
        ("mixed.jsonl:3", "failed", None, "line 3: no 'text' field (fields: 'id', 'body'): name the field that holds the text with --text-field"),
        ("mixed.jsonl:4", "failed", "e", "line 4: empty text: nothing to summarize"),
        ("mixed.jsonl:5", "failed", "n", "line 5: text is int, not text"),
        ("mixed.jsonl:6", "failed", None, "line 6: the id field 'id' is not a string or a number"),
        ("mixed.jsonl:7", "failed", "z", "line 7: the text holds NUL characters"),
        ("mixed.jsonl:9", "text", "ok", "Fine at last.", None),
    ]  # fmt: skip


def test_a_line_longer_than_the_limit_is_skipped_without_being_held_and_the_next_is_read(tmp_path):
    path = write(
        tmp_path,
        "long.jsonl",
        jsonl({"id": "big", "text": "word " * 5000}, {"id": "small", "text": "Short."}),
    )

    found = read(path, max_bytes=1000)

    assert outcomes(found) == [
        ("long.jsonl:1", "failed", None, "line 1: longer than SUMMARIZE_MAX_DOC_BYTES (1,000 bytes): shorten the record or raise the limit"),
        ("long.jsonl:2", "text", "small", "Short.", None),
    ]  # fmt: skip


def test_the_text_and_id_fields_can_be_named(tmp_path):
    path = write(tmp_path, "t.jsonl", jsonl({"ticket": "T-1", "body": "Printer on fire.", "id": 3}))

    (found,) = read(path, Fields(text=("body",), id=("ticket",)))

    assert (found.doc_id, found.body, found.metadata) == ("T-1", "Printer on fire.", '{"id":3}')


def test_csv_rows_are_documents_with_their_other_columns_as_metadata(tmp_path):
    path = write(
        tmp_path,
        "tickets.csv",
        'id,text,team\n1,"Printer, again, on fire.",ops\n2,,ops\n3,"Two\nlines.",dev\n4,Extra,dev,surplus\n',
    )

    assert outcomes(read(path)) == [
        ("tickets.csv:2", "text", "1", "Printer, again, on fire.", '{"team":"ops"}'),
        ("tickets.csv:3", "failed", "2", "line 3: empty text: nothing to summarize"),
        ("tickets.csv:4", "text", "3", "Two\nlines.", '{"team":"dev"}'),
        ("tickets.csv:6", "text", "4", "Extra", '{"team":"dev","_extra":["surplus"]}'),
    ]


def test_a_csv_without_the_text_column_is_one_failure_that_lists_the_columns(tmp_path):
    path = write(tmp_path, "t.csv", "id,body\n1,Hello.\n")

    assert outcomes(read(path)) == [
        ("t.csv", "failed", None, "no column 'text' (columns: 'id', 'body'): name the column that holds the text with --text-field (FILE=NAME for this file alone)"),
    ]  # fmt: skip


def test_a_csv_line_not_utf8_or_too_long_is_a_failed_record_and_the_rest_goes_on(tmp_path):
    long = "x" * 2000
    path = write(
        tmp_path,
        "t.csv",
        f"id,text\n1,Fine.\n2,caf\xe9\n3,{long}\n4,Also fine.\n".encode("latin-1"),
    )

    assert outcomes(read(path, max_bytes=1000)) == [
        ("t.csv:2", "text", "1", "Fine.", None),
        ("t.csv:3", "failed", None, "line 3: not valid UTF-8 (byte 0xe9): save the file as UTF-8"),
        ("t.csv:4", "failed", None, "line 4: longer than SUMMARIZE_MAX_DOC_BYTES (1,000 bytes): shorten the record or raise the limit"),
        ("t.csv:5", "text", "4", "Also fine.", None),
    ]  # fmt: skip


def request(custom_id, text, system=None, **body):
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": text})
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "gpt-4o-mini", "messages": messages, **body},
    }


def test_an_openai_batch_file_gives_each_request_its_id_text_instruction_and_length(tmp_path):
    path = write(
        tmp_path,
        "requests.jsonl",
        jsonl(
            request("req-1", "The council met on Monday.", "Summarize in one line.", max_tokens=40),
            request("req-2", [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}],
                    max_completion_tokens=64),
            {"custom_id": "req-3", "url": "/v1/embeddings", "body": {"input": "x"}},
            {"custom_id": "req-4", "body": {"messages": [{"role": "system", "content": "x"}]}},
            request("req-5", "Too long a summary asked.", max_tokens=100_000),
            {"custom_id": "", "body": {}},
            {"id": "r", "text": "a plain record in an OpenAI file"},
        ),
    )  # fmt: skip

    found = read(path)

    first, second = found[0], found[1]
    assert (first.doc_id, first.body, first.instruction, first.max_tokens, first.metadata) == (
        "req-1", "The council met on Monday.", "Summarize in one line.", 40, None
    )  # fmt: skip
    assert (second.doc_id, second.body, second.instruction, second.max_tokens) == (
        "req-2", "Part one.\n\nPart two.", None, 64
    )  # fmt: skip
    assert outcomes(found[2:]) == [
        ("requests.jsonl:3", "failed", "req-3", "line 3: url '/v1/embeddings': only /v1/chat/completions requests can be summarized"),
        ("requests.jsonl:4", "failed", "req-4", "line 4: no user message to summarize"),
        ("requests.jsonl:5", "failed", "req-5", "line 5: max_tokens 100000 is not a whole number from 1 to 8192"),
        ("requests.jsonl:6", "failed", None, "line 6: no custom_id (a non-empty string)"),
        ("requests.jsonl:7", "failed", None, "line 7: no custom_id (a non-empty string)"),
    ]  # fmt: skip


def test_a_record_file_that_is_not_a_regular_file_is_refused(tmp_path):
    import os

    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)

    (found,) = read(fifo)

    assert isinstance(found, Unreadable) and found.reason == "not a regular file (a FIFO): not read"


def test_a_record_nested_too_deep_for_python_is_a_failed_record_and_the_rest_goes_on(tmp_path):
    deep = '{"id": "a", "text": "x", "extra": ' + "[" * 1000 + "]" * 1000 + "}"
    deep_metadata = '{"id": "b", "text": "x", "extra": ' + "[" * 980 + "]" * 980 + "}"
    path = write(tmp_path, "deep.jsonl", jsonl(deep, deep_metadata, {"text": "Fine."}))

    found = outcomes(read(path))

    nested = "nested too deeply to read (JSON arrays or objects inside each other a thousand deep)"
    assert found[0] == ("deep.jsonl:1", "failed", None, f"line 1: {nested}")
    assert found[1][:2] == ("deep.jsonl:2", "failed") and found[1][3] == f"line 2: {nested}"
    assert found[2] == ("deep.jsonl:3", "text", None, "Fine.", None)


def test_a_csv_record_is_named_by_its_first_line_whatever_its_cells_span(tmp_path):
    path = write(
        tmp_path,
        "multi.csv",
        'id,text\n1,"Two\nlines",extra,"an extra cell\nover\nthree lines"\n\n2,Next.\n',
    )

    found = outcomes(read(path))

    assert [(where, kind) for where, kind, *_ in found] == [
        ("multi.csv:2", "text"),
        ("multi.csv:7", "text"),
    ]
    assert json.loads(found[0][4]) == {"_extra": ["extra", "an extra cell\nover\nthree lines"]}


def test_a_csv_record_over_the_limit_across_lines_is_refused_and_the_next_is_read(tmp_path):
    cell = "a line of a long cell\n" * 50  # 1,100 bytes over many lines, each short
    path = write(tmp_path, "long.csv", f'id,text\n1,Short.,"{cell}"\n2,After it.\n')

    found = outcomes(read(path, max_bytes=1000))

    assert found[0] == (
        "long.csv:2",
        "failed",
        None,
        "line 2: a record of more than SUMMARIZE_MAX_DOC_BYTES (1,000 bytes), through line 52: "
        "shorten it or raise the limit (a quote that never closes makes the rest of the file "
        "one record)",
    )
    assert found[1] == ("long.csv:53", "text", "2", "After it.", None)
