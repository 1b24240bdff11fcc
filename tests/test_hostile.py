"""One bad file never costs the night: every file made to hurt a reader is its own failed row,
and every good document beside it is queued."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from jobs import corpus, extraction, folders
from jobs.corpus import Container
from jobs.documents import Unreadable
from tests import hostile
from tests.documents import PAGE, docx_bytes, pdf_bytes
from tests.helpers import lee, rows_by_name, run, write

sqlite = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def slow_pdf() -> bytes:
    """400 pages drawing one large content stream: a minute of pypdf's time, and a few KB."""
    return hostile.pdf([b" ".join([hostile.shown_text("Loop")] * 20_000)] * 400, shared=True)


@sqlite
@pytest.mark.slow  # 20 s: a PDF of 400 pages read until its text passes the limit
@pytest.mark.timeout(300)
def test_a_folder_of_hostile_files_fails_each_alone_and_queues_every_good_document(
    env, db, tmp_path
):
    folder = tmp_path / "night"
    hostile.build(folder)
    good = sorted(lee().glob("*.txt"))[:3]
    for article in good:
        write(folder, article.name, article.read_bytes())
    write(folder, "report.pdf", pdf_bytes(["The dam holds 40 per cent more water."], "Dam"))
    write(folder, "q3.docx", docx_bytes())
    write(folder, "bridge.html", PAGE)

    done = run(env, "submit", str(folder), "--batch", "night")

    assert done.exit_code == 0, done.output
    found = rows_by_name(db)
    records = {
        "nested.jsonl": ["nested.jsonl:1", "nested.jsonl:2"],
        "unclosed.csv": ["unclosed.csv:2"],
    }
    expected_failures = set(hostile.HOSTILE) - set(records) | {
        r for f in records.values() for r in f
    }
    failed = {name: row.error for name, row in found.items() if row.status == "failed"}
    assert set(failed) == expected_failures, failed
    assert all(error and "\n" not in error for error in failed.values()), failed
    assert failed["inflates.pdf"].startswith("not a PDF that can be read (LimitReachedError")
    assert failed["deep.docx"].startswith("not a Word .docx file that can be read (XMLSyntax")
    assert "zip bomb" in failed["xml-bomb.docx"]
    assert failed["huge-xml.docx"].startswith("its XML unpacks to 200,8")
    assert failed["shared-stream.pdf"].startswith("its text is larger than SUMMARIZE_MAX_DOC")
    assert failed["nested.jsonl:1"].startswith("line 1: nested too deeply to read")
    assert failed["nested.jsonl:2"].startswith("line 2: nested too deeply to read")
    assert failed["unclosed.csv:2"].startswith("line 2: a record of more than SUMMARIZE_MAX_DOC")
    queued = {name for name, row in found.items() if row.status == "queued"}
    assert queued == {
        *(article.name for article in good),
        "report.pdf",
        "q3.docx",
        "bridge.html",
        *hostile.HEAVY.keys() - {"good-after-bad.jsonl"},
        "good-after-bad.jsonl:1",
    }
    assert found["media-bomb.docx"].content_hash is not None  # its text, not its picture
    assert f"failed to read       {len(expected_failures):>8,}" in done.output


@sqlite
@pytest.mark.timeout(120)
def test_a_file_past_the_time_limit_fails_alone_and_the_next_is_read(env, db, tmp_path):
    folder = tmp_path / "in"
    write(folder, "a-slow.pdf", slow_pdf())
    write(folder, "b-fine.pdf", pdf_bytes(["A page read after the slow one."]))

    done = run(env | {"SUMMARIZE_EXTRACT_TIMEOUT_S": "1"}, "submit", str(folder), "--batch", "t")

    assert done.exit_code == 0, done.output
    found = rows_by_name(db)
    assert found["a-slow.pdf"].error == (
        "took longer than 1 s to read: split it, or raise SUMMARIZE_EXTRACT_TIMEOUT_S"
    )
    assert found["b-fine.pdf"].status == "queued"


@sqlite
@pytest.mark.timeout(120)
def test_a_file_past_the_memory_limit_fails_alone_and_the_next_is_read(env, db, tmp_path):
    folder = tmp_path / "in"
    write(folder, "a-inflates.pdf", hostile.pdf([b" " * 70_000_000]))  # under pypdf's own limit
    write(folder, "b-fine.pdf", pdf_bytes(["A page read after the large one."]))

    done = run(env | {"SUMMARIZE_EXTRACT_MEMORY_MB": "64"}, "submit", str(folder), "--batch", "m")

    assert done.exit_code == 0, done.output
    found = rows_by_name(db)
    assert found["a-inflates.pdf"].error == (
        "needs more than 64 MB to read: split it, or raise SUMMARIZE_EXTRACT_MEMORY_MB"
    )
    assert found["b-fine.pdf"].status == "queued"


def containers(folder, max_bytes=1_000_000):
    for found in folders.walk([folder]):
        loaded = corpus.load(found, max_bytes)
        assert isinstance(loaded, Container), loaded
        yield loaded


@pytest.mark.timeout(120)
def test_a_reader_killed_mid_file_fails_that_file_and_a_new_one_reads_the_next(tmp_path):
    write(tmp_path, "a-slow.pdf", slow_pdf())
    write(tmp_path, "b-fine.pdf", pdf_bytes(["Read by a process started afresh."]))
    with extraction.Extractors(processes=1, timeout_s=60, memory_mb=512) as extractors:

        def kill_the_reader():
            while not (extractors.processes and extractors.processes[0].jobs):
                time.sleep(0.05)
            time.sleep(0.3)
            os.kill(extractors.processes[0].process.pid, signal.SIGKILL)

        threading.Thread(target=kill_the_reader).start()
        slow, fine = extractors.in_order(containers(tmp_path))

    assert slow == Unreadable(
        slow.path,
        "the process reading it was killed by SIGKILL: it may be made to crash readers",
    )
    assert fine.body == "Read by a process started afresh."


def test_documents_come_out_in_the_walks_order_whichever_finishes_first(tmp_path):
    write(tmp_path, "a-long.pdf", pdf_bytes(["word " * 400] * 30))
    for i in range(12):
        write(tmp_path, f"b-{i:02}.pdf", pdf_bytes([f"Short document {i}."]))
        write(tmp_path, f"c-{i:02}.txt", f"Text {i}.")
    entries = (corpus.load(found, 1_000_000) for found in folders.walk([tmp_path]))

    with extraction.Extractors(processes=2, timeout_s=60, memory_mb=512) as extractors:
        names = [os.path.basename(item.path) for item in extractors.in_order(entries)]

    assert names == sorted(os.listdir(tmp_path))


def test_no_process_is_started_for_text_and_markdown(tmp_path):
    write(tmp_path, "a.txt", "Plain text.")
    write(tmp_path, "b.md", "# Markdown")
    entries = (corpus.load(found, 1_000_000) for found in folders.walk([tmp_path]))

    with extraction.Extractors(processes=2, timeout_s=60, memory_mb=512) as extractors:
        items = list(extractors.in_order(entries))
        assert extractors.processes == []

    assert [item.body for item in items] == ["Plain text.", "Title: Markdown"]
