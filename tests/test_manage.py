"""After submit: stream results, list batches, retry failures, cancel what waits."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess

import pytest
import redis
import sqlalchemy as sa
from click.testing import CliRunner

from core.settings import Settings
from core.tables import results
from summarize.cli import main
from tests.batches import summarize_queued
from tests.fakes import FakeEngine
from tests.helpers import all_rows, run, summarize_one, write
from tests.stack import SUMMARIZE
from worker.drain import Drain
from worker.recorder import Recorder
from worker.tickets import Signal

WAIT_S = 10


@pytest.fixture
def processed(env, settings, db, tmp_path):
    """A batch summarized by the real drain loop (stand-in engine): 2 succeed, 1 fails twice over."""
    folder = tmp_path / "in"
    write(folder, "a.txt", "Alpha report, line one.")
    write(folder, "b.md", 'Beta report:\nwith "quotes", commas, and ünïcödé.')
    write(folder, "c.txt", "poison here")
    write(folder, "empty.txt", "")
    assert run(env, "submit", str(folder), "--batch", "night").exit_code == 0
    summarize_queued(settings.with_changes(max_attempts=1), db, "night")
    client = redis.Redis.from_url(env["SUMMARIZE_BROKER_URL"])
    client.delete(env["SUMMARIZE_QUEUE"])  # the messages were consumed
    return folder


def test_results_stream_every_column_as_json_lines(env, db, processed):
    result = run(env, "results", "--batch", "night")

    assert result.exit_code == 0
    lines = [json.loads(line) for line in result.output.splitlines()]
    rows = all_rows(db)
    assert len(lines) == len(rows) == 4
    for line, row in zip(lines, rows, strict=True):
        assert line["id"] == row.id
        assert line["source_path"] == row.source_path
        assert line["status"] == row.status
        assert line["summary"] == row.summary
        assert line["prompt_tokens"] == row.prompt_tokens
        assert line["error"] == row.error
        assert list(line) == [c.name for c in results.columns]


def test_results_as_csv_round_trip_and_filter_by_status(env, db, processed):
    result = run(env, "results", "--batch", "night", "--status", "failed", "--format", "csv")

    parsed = list(csv.DictReader(io.StringIO(result.output)))
    failed = [r for r in all_rows(db) if r.status == "failed"]
    assert [p["source_path"] for p in parsed] == [r.source_path for r in failed]
    assert [p["error"] for p in parsed] == [r.error for r in failed]
    assert {p["status"] for p in parsed} == {"failed"}
    assert parsed[0].keys() == {c.name for c in results.columns}


def test_csv_cells_that_a_spreadsheet_would_run_as_formulas_are_escaped(env, db, processed):
    hostile = ['=HYPERLINK("http://x")', "+1+1", "-2+3", "@SUM(A1)", "\tcmd", "\rcmd"]
    with db.begin() as conn:
        ids = conn.execute(sa.select(results.c.id).order_by(results.c.id)).scalars().all()
        for row_id, text in zip(ids, hostile, strict=False):
            conn.execute(results.update().where(results.c.id == row_id).values(summary=text))

    result = run(env, "results", "--batch", "night", "--format", "csv")

    parsed = list(csv.DictReader(io.StringIO(result.output)))
    assert [p["summary"] for p in parsed] == ["'" + text for text in hostile[: len(ids)]]
    as_json = [json.loads(line)["summary"] for line in run(env, "results").output.splitlines()]
    assert as_json == hostile[: len(ids)]  # JSON lines are data, kept as they are


def test_names_are_printed_with_their_control_characters_shown_not_obeyed(env, db, tmp_path):
    write(tmp_path / "in", "a.txt", "Alpha.")
    name = "night\x1b[2J\x1b]0;owned\x07"
    assert run(env, "submit", str(tmp_path / "in"), "--batch", name).exit_code == 0

    for command in (["batches"], ["status"]):
        output = run(env, *command).output
        assert "\x1b" not in output and "\x07" not in output
        assert "night\\x1b[2J" in output


def test_results_of_an_unknown_batch_say_how_to_find_one(env, db):
    result = CliRunner().invoke(main, ["results", "--batch", "nope"], env=env)
    assert result.exit_code == 1
    assert result.output == "Error: No batch named 'nope': `summarize batches` lists them.\n"


def test_batches_lists_counts_per_status(env, db, processed):
    result = run(env, "batches")
    (line,) = [line for line in result.output.splitlines() if line.startswith("night")]
    assert line.split()[3:] == ["4", "0", "2", "2", "0", "0"]  # docs … cancelled, expired
    listed = {b["batch"]: b for b in json.loads(run(env, "batches", "--json").output)}
    (night,) = json.loads(run(env, "status", "night", "--json").output)
    assert listed["night"] == night
    assert night["request_counts"] == {
        "total": 4,
        "completed": 2,
        "failed": 2,
        "cancelled": 0,
        "expired": 0,
    }


def test_status_counts_the_summaries_that_loop_are_cut_at_the_length_cap_or_have_a_flaw(
    env, settings, db, tmp_path
):
    folder = tmp_path / "in"
    write(folder, "fine.txt", "An ordinary report.")
    write(folder, "stuck.txt", "stuck")  # the stand-in's summary loops, even when asked not to
    write(folder, "loopy.txt", "loopy")  # loops once; generated again, it does not
    assert run(env, "submit", str(folder), "--batch", "night").exit_code == 0
    summarize_queued(settings, db, "night")
    write(tmp_path / "short", "cut.txt", "A report.")  # a 3-token cap: cut
    short = env | {"SUMMARIZE_MAX_TOKENS": "3"}
    assert run(short, "submit", str(tmp_path / "short"), "--batch", "short").exit_code == 0
    summarize_queued(Settings.from_env(short), db, "short")

    table = run(env, "status").output.splitlines()
    (quality,) = json.loads(run(env, "status", "night", "--json").output)

    assert table[0].split()[-3:] == ["looped", "cut", "flawed"]
    rows = {line.split()[0]: line.split()[-3:] for line in table[1:]}
    # flawed: the stand-in's `summary of N tokens` is a headline (stuck.txt's loops instead)
    assert rows == {"night": ["1", "0", "2"], "short": ["0", "1", "1"]}
    assert quality["quality"] | {"repetition": None, "copied": None, "compression": None} == {
        "summaries": 3,
        "looped": 1,
        "truncated": 0,
        "novel_numbers": 2,  # `summary of N tokens`: N is not in fine.txt nor loopy.txt
        "flawed": 2,
        "repetition": None,
        "copied": None,
        "compression": None,
    }
    assert 0 < quality["quality"]["repetition"] < 1  # stuck.txt's loop


def test_retry_queues_failed_documents_again_and_names_those_that_cannot_be(env, db, processed):
    result = run(env, "retry", "night")

    assert result.exit_code == 0
    assert result.output == (
        "Queued 1 failed row of night again (1 document). 1 failed at "
        "submit and has no text: fix the file and submit it again.\n"
    )
    by_name = {r.source_path.rsplit("/", 1)[-1]: r for r in all_rows(db)}
    assert (by_name["c.txt"].status, by_name["c.txt"].attempts, by_name["c.txt"].error) == (
        "queued",
        0,
        None,
    )
    assert by_name["empty.txt"].status == "failed"
    client = redis.Redis.from_url(env["SUMMARIZE_BROKER_URL"])
    assert client.llen(env["SUMMARIZE_QUEUE"]) == 1


def test_a_retry_redis_refuses_leaves_the_rows_failed_and_says_so(
    env, settings, db, processed, monkeypatch
):
    from core import producer
    from core.errors import BrokerUnavailable
    from jobs import batches

    def refused(*_args, **_kwargs):
        raise redis.ConnectionError("Connection refused")

    monkeypatch.setattr(producer, "enqueue", refused)

    with pytest.raises(BrokerUnavailable, match="Redis"):
        batches.retry_failed(db, settings, "night")

    by_name = {r.source_path.rsplit("/", 1)[-1]: r for r in all_rows(db)}
    assert by_name["c.txt"].status == "failed"
    assert by_name["c.txt"].error == batches.RETRY_UNSENT
    client = redis.Redis.from_url(env["SUMMARIZE_BROKER_URL"])
    assert client.llen(env["SUMMARIZE_QUEUE"]) == 0


def test_cancel_marks_queued_documents_and_the_worker_skips_them(env, settings, db, tmp_path):
    write(tmp_path / "in", "a.txt", "Waiting.")
    write(tmp_path / "in", "b.txt", "Running.")
    run(env, "submit", str(tmp_path / "in"), "--batch", "b")
    with db.begin() as conn:
        conn.execute(
            results.update().where(results.c.source_path.like("%b.txt")).values(status="running")
        )

    result = run(env, "cancel", "b")

    assert result.output == "Cancelled 1 queued document of b.\n"
    by_name = {r.source_path.rsplit("/", 1)[-1]: r for r in all_rows(db)}
    assert by_name["a.txt"].status == "cancelled"
    assert by_name["b.txt"].status == "running"
    heading, line = run(env, "status", "b").output.splitlines()[:2]
    shown = dict(zip(heading.split()[:7], line.split()[:7], strict=True))
    assert shown == {"batch": "b", "docs": "2", "queued": "0", "running": "1",
                     "succeeded": "0", "failed": "0", "ended": "1"}  # fmt: skip
    engine = FakeEngine()
    drain = Drain(engine, Recorder(db, retry_s=1), settings, on_fatal=lambda d: None)
    drain.start()
    outcome = summarize_one(drain, by_name["a.txt"].result_key).result(WAIT_S)
    drain.stop(5)
    assert outcome is Signal.SKIPPED
    assert engine.added == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.slow
def test_results_of_a_million_rows_stream_in_constant_memory(env, db, tmp_path):
    def export_peak_rss_mb(rows: int) -> float:
        # Rows are made by SQL alone: a test process holding a million rows would lend its
        # memory to the child it forks, and ru_maxrss would count it.
        with db.begin() as conn:
            conn.execute(results.delete())
            conn.execute(
                sa.text(
                    "INSERT OR IGNORE INTO batches (name, model, instruction, max_tokens, prompt_hash, "
                    "created_at) VALUES ('big', 'm', 'i', 1, 'p', '2026-01-01')"
                )
            )
            conn.execute(
                sa.text(
                    "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < :last) "
                    "INSERT INTO results (batch, source_path, status, summary, model, prompt_hash, "
                    "attempts, deduplicated, prompt_tokens, completion_tokens, created_at) "
                    "SELECT 'big', printf('/data/%07d.txt', i), 'succeeded', "
                    "printf('Summary number %d of a long export.', i), 'm', 'p', 1, 0, 100, 20, "
                    "'2026-11-29 00:00:00' FROM n"
                ),
                {"last": rows - 1},
            )
        process = subprocess.Popen(
            [*SUMMARIZE, "results", "--format", "csv"], env=os.environ | env, stdout=subprocess.PIPE
        )
        lines = sum(1 for _ in process.stdout)
        _, status, usage = os.wait4(process.pid, 0)
        assert status == 0 and lines == rows + 1
        return usage.ru_maxrss / 1024

    small = export_peak_rss_mb(1_000)
    large = export_peak_rss_mb(1_000_000)

    assert large - small < 25, f"{small:.0f} MB for a thousand rows, {large:.0f} MB for a million"
