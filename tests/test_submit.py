"""`summarize submit`: rows recorded, messages queued, duplicates answered, bad input reported."""

from __future__ import annotations

import os
import re
import shutil

import pytest
import redis
import sqlalchemy as sa
from click.testing import CliRunner

from core import database
from core.tables import batches, documents, results
from summarize.cli import main
from tests.helpers import queued_keys, queued_messages, rows_by_name, run, summary_line, write


def test_submit_records_a_row_per_document_and_queues_them_in_one_json_chunk(env, db, tmp_path):
    write(tmp_path / "in", "a.txt", "First document.")
    write(tmp_path / "in", "sub/b.md", "Second document.")

    result = run(env, "submit", str(tmp_path / "in"), "--batch", "first")

    assert result.exit_code == 0, result.output
    assert summary_line(result.output, "documents found") == 2
    assert summary_line(result.output, "queued") == 2
    rows = rows_by_name(db)
    assert {name: r.status for name, r in rows.items()} == {"a.txt": "queued", "b.md": "queued"}
    assert rows["a.txt"].batch == "first"
    assert rows["a.txt"].model == "SmolLM2-135M-Instruct"
    assert rows["a.txt"].attempts == 0
    (message,) = queued_messages(env)  # one chunk carries both
    assert (message["task"], message["content_type"]) == ("summarize.chunk", "application/json")
    assert sorted(message["keys"]) == sorted(r.result_key for r in rows.values())
    with db.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(documents)).scalar() == 2
        assert conn.execute(sa.select(batches.c.name)).scalars().all() == ["first"]


def test_other_files_are_skipped_and_unreadable_ones_become_failed_rows(env, db, tmp_path):
    folder = tmp_path / "in"
    write(folder, "good.txt", "Fine text.")
    write(folder, "image.png", b"\x89PNG")
    write(folder, "empty.txt", "")
    write(folder, "latin1.txt", b"caf\xe9")
    write(folder, "blob.md", b"\x00\x01\x02")

    result = run(env, "submit", str(folder), "--batch", "mixed")

    assert result.exit_code == 0, result.output
    assert summary_line(result.output, "documents found") == 4
    assert summary_line(result.output, "queued") == 1
    assert summary_line(result.output, "skipped") == 1
    assert summary_line(result.output, "failed to read") == 3
    assert (
        "latin1.txt': not valid UTF-8 (byte 0xe9 at offset 3): convert it to UTF-8" in result.output
    )
    rows = rows_by_name(db)
    assert {n: (r.status, r.error) for n, r in rows.items() if n != "good.txt"} == {
        "empty.txt": ("failed", "empty file: nothing to summarize"),
        "latin1.txt": ("failed", "not valid UTF-8 (byte 0xe9 at offset 3): convert it to UTF-8"),
        "blob.md": ("failed", "binary file (it contains NUL bytes): only text is summarized"),
    }
    assert len(queued_keys(env)) == 1


def test_a_document_summarized_before_is_answered_from_its_summary(env, db, tmp_path):
    write(tmp_path / "one", "a.txt", "Same words.")
    write(tmp_path / "two", "copy.txt", "Same words.")
    write(tmp_path / "two", "new.txt", "Other words.")
    run(env, "submit", str(tmp_path / "one"), "--batch", "monday")
    with db.begin() as conn:  # as the worker would leave it
        conn.execute(
            results.update().values(
                status="succeeded",
                summary="S.",
                prompt_tokens=7,
                completion_tokens=2,
                finish_reason="stop",
            )
        )
    redis.Redis.from_url(env["SUMMARIZE_BROKER_URL"]).delete(env["SUMMARIZE_QUEUE"])

    result = run(env, "submit", str(tmp_path / "two"), "--batch", "tuesday")

    assert summary_line(result.output, "queued") == 1
    assert summary_line(result.output, "deduplicated") == 1
    copy = rows_by_name(db)["copy.txt"]
    assert (copy.batch, copy.status, copy.summary, copy.prompt_tokens, copy.deduplicated) == (
        "tuesday",
        "succeeded",
        "S.",
        7,
        True,
    )
    assert len(queued_keys(env)) == 1


def test_a_summary_is_reused_from_a_copy_once_the_row_that_generated_it_is_purged(
    env, db, tmp_path
):
    write(tmp_path / "one", "a.txt", "Same words.")
    run(env, "submit", str(tmp_path / "one"), "--batch", "monday")
    with db.begin() as conn:  # as the worker would leave it
        conn.execute(results.update().values(status="succeeded", summary="S.", prompt_tokens=7))
    for night in ("tuesday", "wednesday"):  # copies of monday's summary
        run(env, "submit", str(tmp_path / "one"), "--batch", night)
    assert run(env, "purge", "--batch", "monday").exit_code == 0

    result = run(env, "submit", str(tmp_path / "one"), "--batch", "thursday")

    assert summary_line(result.output, "deduplicated") == 1
    with db.connect() as conn:
        rows = {r.batch: r for r in conn.execute(sa.select(results))}
    assert set(rows) == {"tuesday", "wednesday", "thursday"}
    assert (rows["thursday"].summary, rows["thursday"].prompt_tokens) == ("S.", 7)


def test_the_same_content_twice_in_one_batch_is_queued_once(env, db, tmp_path):
    write(tmp_path / "in", "a.txt", "Twin.")
    write(tmp_path / "in", "b.txt", "Twin.")

    result = run(env, "submit", str(tmp_path / "in"), "--batch", "twins")

    assert summary_line(result.output, "queued") == 1
    assert summary_line(result.output, "deduplicated") == 1
    rows = rows_by_name(db)
    assert rows["a.txt"].result_key == rows["b.txt"].result_key
    assert {r.status for r in rows.values()} == {"queued"}
    # One generation answers both; its tokens count once, on the first row.
    assert (rows["a.txt"].deduplicated, rows["b.txt"].deduplicated) == (False, True)
    assert len(queued_keys(env)) == 1


def test_submitting_the_same_batch_again_does_no_work_twice(env, db, tmp_path):
    write(tmp_path / "in", "a.txt", "Once.")
    run(env, "submit", str(tmp_path / "in"), "--batch", "nightly")

    again = run(env, "submit", str(tmp_path / "in"), "--batch", "nightly")

    assert again.exit_code == 0
    assert summary_line(again.output, "already in batch") == 1
    assert summary_line(again.output, "queued") == 0
    assert len(rows_by_name(db)) == 1
    assert len(queued_keys(env)) == 1


def test_a_batch_name_is_made_from_the_folder_and_time_when_none_is_given(env, db, tmp_path):
    write(tmp_path / "reports", "a.txt", "Text.")
    result = run(env, "submit", str(tmp_path / "reports"))
    assert re.search(r"^Batch reports-\d{8}-\d{6}$", result.output, re.M), result.output


def test_a_batch_cannot_change_its_prompt(env, db, tmp_path):
    write(tmp_path / "in", "a.txt", "Text.")
    run(env, "submit", str(tmp_path / "in"), "--batch", "b")
    result = run(
        env | {"SUMMARIZE_PROMPT": "Other."}, "submit", str(tmp_path / "in"), "--batch", "b"
    )
    assert result.exit_code == 1
    assert (
        "Error: Batch 'b' was submitted with other settings: instruction 'Summarize the "
        "document below in two or three sentences. Sta…' (now 'Other.'); "
        "sentence limit 3 (now none): submit with the batch's settings, or choose another --batch "
        "name." in result.output
    )


def test_a_file_name_that_is_not_utf8_gets_a_failed_row_and_the_rest_goes_on(env, db, tmp_path):
    folder = tmp_path / "in"
    write(folder, "good.txt", "A good document.")
    with open(os.fsencode(folder) + b"/caf\xe9.txt", "wb") as odd:
        odd.write(b"Text in a file whose name is Latin-1.")

    done = run(env, "submit", str(folder), "--batch", "names")

    assert done.exit_code == 0
    with db.connect() as conn:
        found = {r.source_path: r for r in conn.execute(sa.select(results))}
    odd_row = found[f"{folder}/caf\\xe9.txt"]
    assert odd_row.status == "failed"
    assert "file name is not UTF-8" in odd_row.error
    assert found[f"{folder}/good.txt"].status == "queued"


def test_a_batch_name_too_long_for_its_column_is_refused_with_the_limit(env, db, tmp_path):
    write(tmp_path / "in", "a.txt", "A.")
    done = CliRunner().invoke(main, ["submit", str(tmp_path / "in"), "--batch", "n" * 201], env=env)
    assert done.exit_code == 1
    assert done.output.endswith(
        "Error: The batch name is 201 characters long; at most 200 fit: choose a shorter --batch.\n"
    )


def test_a_link_out_of_the_folder_is_a_failed_row_and_a_line_not_a_document(env, db, tmp_path):
    write(tmp_path / "private", "key.txt", "not for summarizing")
    write(tmp_path / "in", "a.txt", "A.")
    os.symlink(tmp_path / "private" / "key.txt", tmp_path / "in" / "notes.txt")

    done = run(env, "submit", str(tmp_path / "in"), "--batch", "links")

    assert "outside the folder given: not followed (--follow-links follows it)" in done.output
    with db.connect() as conn:
        found = {r.source_path: r for r in conn.execute(sa.select(results))}
        texts = conn.execute(sa.select(documents.c.body)).scalars().all()
    assert found[f"{tmp_path}/in/notes.txt"].status == "failed"
    assert "not for summarizing" not in texts
    followed = run(env, "submit", str(tmp_path / "in"), "--batch", "links2", "--follow-links")
    assert "queued                      1" in followed.output  # a.txt: queued before
    assert "failed to read              0" in followed.output


def test_a_path_that_does_not_exist_is_an_error_not_a_green_night(env, db, tmp_path):
    done = CliRunner().invoke(main, ["submit", str(tmp_path / "typo")], env=env)

    assert done.exit_code == 1
    assert "paths not usable            1" in done.output
    assert f"Error: No path given could be used ('{tmp_path / 'typo'}': " in done.output
    assert "nothing was queued" in done.output
    waiting = run(env, "submit", str(tmp_path / "typo"), str(write(tmp_path, "a.txt", "A.")))
    assert waiting.exit_code == 0  # one usable path is enough: the other is reported


def test_an_unreachable_redis_fails_fast_and_writes_no_rows(env, db, tmp_path):
    write(tmp_path / "in", "a.txt", "Text.")
    env = env | {"SUMMARIZE_BROKER_URL": "redis://:hunter2@127.0.0.1:1/0"}

    result = run(env, "submit", str(tmp_path / "in"), "--batch", "b")

    assert result.exit_code == 5
    assert "Error: Redis is not reachable at redis://:***@127.0.0.1:1/0" in result.output
    assert "hunter2" not in result.output
    assert "unset SUMMARIZE_BROKER_URL to use the embedded one" in result.output
    assert rows_by_name(db) == {}


@pytest.mark.parametrize("database_url", ["postgresql://postgres@127.0.0.1:1/test"], indirect=False)
def test_an_unreachable_database_fails_fast_with_the_fix(tmp_path, redis_url, database_url):
    write(tmp_path / "in", "a.txt", "Text.")
    env = {
        "SUMMARIZE_DATA_DIR": str(tmp_path),
        "SUMMARIZE_DATABASE_URL": database_url,
        "SUMMARIZE_BROKER_URL": redis_url,
    }

    result = run(env, "submit", str(tmp_path / "in"))

    assert result.exit_code == 5
    assert (
        "Error: The database at postgresql://postgres@127.0.0.1:1/test is not reachable"
        in result.output
    )
    assert "fix SUMMARIZE_DATABASE_URL" in result.output


def test_wait_exits_3_when_a_document_of_the_batch_failed(env, db, tmp_path):
    write(tmp_path / "in", "empty.txt", "")
    result = run(env, "submit", str(tmp_path / "in"), "--batch", "bad", "--wait")
    assert result.exit_code == 3
    assert "1 of 1 finished: 1 failed" in result.output


def test_wait_exits_4_when_the_timeout_passes_first(env, db, tmp_path):
    write(tmp_path / "in", "a.txt", "Nobody summarizes me: no worker runs.")
    result = run(env, "submit", str(tmp_path / "in"), "--batch", "slow", "--wait", "--timeout", "1")
    assert result.exit_code == 4
    assert "0 of 1 finished: 1 queued" in result.output


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.slow
def test_a_folder_of_100000_files_is_submitted_whole(env, db, tmp_path):
    folder = tmp_path / "many"
    for i in range(100_000):
        if i % 1000 == 0:
            (folder / f"{i // 1000:03d}").mkdir(parents=True)
        (folder / f"{i // 1000:03d}" / f"{i:06d}.txt").write_text(f"Document number {i}.\n")
    try:
        result = run(env, "submit", str(folder), "--batch", "many")

        assert result.exit_code == 0, result.output
        assert summary_line(result.output, "documents found") == 100_000
        assert summary_line(result.output, "queued") == 100_000
        assert len(set(queued_keys(env))) == 100_000
        with db.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(results)).scalar() == 100_000
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_postgresql_plans_each_statement_for_its_values_not_for_an_empty_table(settings):
    """A generic plan made while `results` was empty would be kept as it grows (no ANALYZE
    without autovacuum): submit slowed from 1,300 to 100 documents a second at 60,000 rows."""
    for readonly in (False, True):
        engine = database.connect(settings, readonly=readonly)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SHOW plan_cache_mode")).scalar() == "force_custom_plan"
        engine.dispose()
