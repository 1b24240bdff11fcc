"""What a new user trips on, with the embedded defaults and the instant engine: every step says
what is going on and what to do, and leaves nothing behind it did not mean to."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import subprocess
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from core import database
from core.settings import Settings, redact_url
from core.tables import batches, results, utcnow
from tests.helpers import rows_by_name, run, write
from tests.stack import SUMMARIZE, cli

sqlite = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.fixture
def embedded(tmp_path, queue_name) -> dict[str, str]:
    """The defaults a new user has: a data directory, the embedded Redis, the instant engine."""
    env = {
        "SUMMARIZE_DATA_DIR": str(tmp_path / "data"),
        "SUMMARIZE_QUEUE": queue_name,
        "SUMMARIZE_MODEL": "echo",
    }
    yield env
    from core.broker import EmbeddedRedis

    EmbeddedRedis(Settings.from_env(env)).stop()


# 1. An expired batch is never summarized


@sqlite
@pytest.mark.timeout(120)
def test_a_burst_worker_ends_an_expired_batch_without_summarizing_it(env, db, tmp_path):
    echo = env | {"SUMMARIZE_MODEL": "echo"}
    for name in ("a.txt", "b.txt"):
        write(tmp_path / "in", name, f"Document {name}. It says little.")
    submitted = run(echo, "submit", str(tmp_path / "in"), "--batch", "exp", "--expire-after", "1s")
    assert submitted.exit_code == 0, submitted.output
    time.sleep(1.5)  # the batch expires before any worker starts

    done = cli(echo, "worker", "--burst")

    assert done.returncode == 0, done.stderr[-3000:]
    assert {name: row.status for name, row in rows_by_name(db).items()} == {
        "a.txt": "expired",
        "b.txt": "expired",
    }


@sqlite
def test_a_claim_never_starts_a_document_whose_batch_has_expired(env, settings, db, tmp_path):
    from worker.recorder import Recorder

    write(tmp_path / "in", "a.txt", "An article.")
    run(env, "submit", str(tmp_path / "in"), "--batch", "late", "--expire-after", "1h")
    with db.begin() as conn:
        conn.execute(batches.update().values(expires_at=utcnow() - timedelta(seconds=1)))
        (key,) = conn.execute(sa.select(results.c.result_key)).scalars()

    assert Recorder(db).claim([key]) == {}
    assert rows_by_name(db)["a.txt"].status == "queued"  # for the sweep to end as expired


# 2. Nobody is left waiting for a worker that was never started


@pytest.mark.timeout(120)
def test_with_no_worker_running_status_and_submit_wait_say_to_start_one(embedded, tmp_path):
    write(tmp_path / "in", "a.txt", "An article nobody summarizes.")

    waited = cli(
        embedded, "submit", str(tmp_path / "in"), "--batch", "b", "--wait", "--timeout", "1"
    )
    status = cli(embedded, "status")
    as_json = json.loads(cli(embedded, "status", "--json").stdout)

    start = (
        "No live worker serves model 'echo': start one with `SUMMARIZE_MODEL=echo summarize worker`"
    )
    assert waited.returncode == 4
    assert f"{start}; waiting for one." in waited.stderr
    assert f"{start}; none came before the timeout." in waited.stderr
    assert (
        "1 document waits for model 'echo', which no live worker serves: start one with "
        "SUMMARIZE_MODEL=echo summarize worker" in status.stdout
    )
    assert as_json[0]["workers"] == 0


def test_the_doctor_fails_when_documents_wait_and_no_worker_is_live(embedded, tmp_path):
    from summarize.doctor import check_workers

    write(tmp_path / "in", "a.txt", "An article nobody summarizes.")
    assert cli(embedded, "submit", str(tmp_path / "in"), "--batch", "b").returncode == 0

    check = check_workers(Settings.from_env(embedded))

    assert not check.ok
    assert check.found.startswith("0 live worker(s); 1 document waits for model 'echo'")


# 3. A closed pipe ends an export quietly


@pytest.mark.timeout(120)
def test_an_export_piped_into_head_ends_with_status_0_and_says_nothing(embedded, tmp_path):
    for i in range(400):  # more than a pipe's buffer of rows
        write(tmp_path / "in", f"{i:03}.txt", f"Article number {i}, which says little. " * 5)
    assert cli(embedded, "submit", str(tmp_path / "in"), "--batch", "b").returncode == 0

    export = subprocess.Popen(
        [*SUMMARIZE, "results", "--format", "csv"],
        env=os.environ | embedded,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    export.stdout.readline()
    export.stdout.close()  # as `head -1` does

    assert export.wait(60) == 0
    assert export.stderr.read() == b""


# 4. A file read at last replaces its old failure


@sqlite
def test_a_record_file_read_at_last_replaces_its_failed_row(env, db, tmp_path):
    folder = tmp_path / "in"
    write(folder, "tickets.csv", "ticket,body\nT-1,Printer on fire.\nT-2,Toner low.\n")
    first = run(env, "submit", str(folder), "--batch", "b")
    assert rows_by_name(db)["tickets.csv"].status == "failed"

    again = run(env, "submit", str(folder), "--batch", "b", "--text-field", "body")

    assert again.exit_code == 0, again.output
    assert "read now, not before        1" in again.output
    assert {name: row.status for name, row in rows_by_name(db).items()} == {
        "tickets.csv:2": "queued",
        "tickets.csv:3": "queued",
    }
    assert first.exit_code == 0


@sqlite
def test_each_record_file_can_name_its_own_text_field(env, db, tmp_path):
    folder = tmp_path / "in"
    write(folder, "tickets.csv", "ticket,body\nT-1,Printer on fire.\n")
    write(folder, "news.jsonl", '{"id": "n1", "text": "Floods close the road."}\n')
    write(folder, "mail.jsonl", '{"id": "m1", "message": "Lunch at noon."}\n')

    done = run(
        env, "submit", str(folder), "--batch", "b",
        "--text-field", "tickets.csv=body", "--id-field", "tickets.csv=ticket",
        "--text-field", "text", "--text-field", "message",
    )  # fmt: skip

    assert done.exit_code == 0, done.output
    assert {name: (row.status, row.doc_id) for name, row in rows_by_name(db).items()} == {
        "mail.jsonl:1": ("queued", "m1"),
        "news.jsonl:1": ("queued", "n1"),
        "tickets.csv:2": ("queued", "T-1"),
    }


# 5. A submit that queues nothing leaves no batch


@sqlite
def test_a_submit_of_nothing_usable_leaves_no_empty_batch(env, db, tmp_path):
    done = run(env, "submit", str(tmp_path / "missing"), "--batch", "x1")

    assert done.exit_code == 1
    assert json.loads(run(env, "batches", "--json").output) == []


# 6. A mistyped database URL is refused, and a reader makes no database


def test_a_database_in_a_folder_that_does_not_exist_is_refused_not_made(tmp_path, queue_name):
    missing = tmp_path / "nonexistent" / "dir" / "x.db"
    env = {
        "SUMMARIZE_DATA_DIR": str(tmp_path / "data"),
        "SUMMARIZE_DATABASE_URL": f"sqlite:///{missing}",
        "SUMMARIZE_QUEUE": queue_name,
    }
    write(tmp_path / "in", "a.txt", "An article.")

    status = run(env, "status")
    submit = run(env, "submit", str(tmp_path / "in"))

    assert status.exit_code == 0
    assert f"No database at {missing} yet" in status.output
    assert submit.exit_code == 1
    assert f"names {missing}, in a folder that does not exist" in submit.output
    assert not (tmp_path / "nonexistent").exists()


@pytest.mark.parametrize("command", [["status"], ["results"], ["batches"]])
def test_a_reader_never_makes_a_database(tmp_path, command):
    env = {"SUMMARIZE_DATA_DIR": str(tmp_path / "data")}

    done = run(env, *command)

    assert done.exit_code == 0, done.output
    assert not (tmp_path / "data" / "summarize.db").exists()


# 7. A batch's other settings are named, not hashed


@sqlite
def test_submitting_into_a_batch_with_other_settings_names_them(env, db, tmp_path):
    write(tmp_path / "in", "a.txt", "An article.")
    run(env, "submit", str(tmp_path / "in"), "--batch", "b", "--prompt", "List the facts.")

    done = run(env, "submit", str(tmp_path / "in"), "--batch", "b", "--max-tokens", "64")

    assert done.exit_code == 1
    assert (
        "Error: Batch 'b' was submitted with other settings: instruction 'List the facts.' "
        "(now 'Summarize the document below in two or three sentences. Sta…'); "
        "summary length 128 (now 64); sentence limit none (now 3): submit with the batch's "
        "settings, or choose another --batch name." in done.output
    )


# 8. Passwords stay hidden whatever they hold


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://summarize:Tr0ub4dor/3#x@127.0.0.1:1/summarize",
            "postgresql://summarize:***@127.0.0.1:1/summarize",
        ),
        ("redis://:pa/ss?w#rd@redis:6379/0", "redis://:***@redis:6379/0"),
        ("postgresql://u:a@b@db/x", "postgresql://u:***@db/x"),
        ("not a url: hunter2", "(not shown: it is not a URL)"),
    ],
)
def test_a_password_with_slashes_question_marks_or_hashes_is_hidden(url, shown):
    assert redact_url(url) == shown


def test_commands_print_no_password_of_a_database_url(tmp_path):
    env = {
        "SUMMARIZE_DATA_DIR": str(tmp_path / "data"),
        "SUMMARIZE_DATABASE_URL": "postgresql://summarize:Tr0ub4dor/3#x@127.0.0.1:1/summarize",
    }

    for command in (["status"], ["db", "upgrade"]):
        done = run(env, *command)
        assert done.exit_code == 5, done.output
        assert "Tr0ub4dor" not in done.output and "3#x" not in done.output
        assert "postgresql://summarize:***@127.0.0.1:1/summarize" in done.output


# 9. What summarize keeps is its user's alone


@pytest.mark.timeout(120)
def test_the_data_directory_database_and_redis_files_are_this_users_alone(embedded, tmp_path):
    from summarize.doctor import check_files

    data = tmp_path / "data"
    write(tmp_path / "in", "a.txt", "An article.")
    old = os.umask(0o022)
    try:
        assert cli(embedded, "submit", str(tmp_path / "in")).returncode == 0
    finally:
        os.umask(old)

    modes = {
        str(path.relative_to(data)): stat.S_IMODE(path.stat().st_mode)
        for path in [data, *data.rglob("*")]
        if not path.is_socket()
    }
    assert modes["."] == 0o700
    assert modes["summarize.db"] == 0o600
    assert all(mode & 0o077 == 0 for mode in modes.values()), modes
    settings = Settings.from_env(embedded)
    assert check_files(settings).ok
    (data / "summarize.db").chmod(0o644)
    assert check_files(settings).found == (
        f"open to other users: {data / 'summarize.db'} is 644 (chmod 600 {data / 'summarize.db'})"
    )


def test_the_database_is_a_file_of_its_users_alone_from_its_first_write(tmp_path):
    settings = Settings.from_env({"SUMMARIZE_DATA_DIR": str(tmp_path / "data")})

    database.ready(settings).dispose()

    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "data" / "summarize.db").stat().st_mode) == 0o600


# 10. Names a submitter chose cannot drive the terminal


@sqlite
def test_a_model_name_with_escape_sequences_is_printed_shown_not_obeyed(env, tmp_path):
    write(tmp_path / "in", "a.txt", "An article.")
    evil = "evil\x1b]0;OWNED\x07\x1b[2J"
    assert run(env, "submit", str(tmp_path / "in"), "--model", evil).exit_code == 0

    status = run(env, "status").output

    assert "\x1b" not in status and "\x07" not in status
    assert "evil\\x1b]0;OWNED\\x07\\x1b[2J" in status


# 11. Exported CSV cannot run as formulas


def test_csv_cells_that_become_formulas_after_a_separator_or_space_are_neutralised():
    from readers import export

    row = dict.fromkeys(export.EXPORTED) | {"summary": "x;=1+1", "error": " =1+1", "attempts": 2}
    out = io.StringIO()

    export.write(iter([row]), out, "csv")

    (parsed,) = csv.DictReader(io.StringIO(out.getvalue()))
    assert (parsed["summary"], parsed["error"]) == ("'x;=1+1", "' =1+1")
    line = out.getvalue().splitlines()[1]
    assert '"\'x;=1+1"' in line and ",2," in line  # text quoted, numbers not


# 12. One message cannot name more documents than a message carries


def test_a_message_naming_more_documents_than_a_chunk_holds_is_refused():
    from core.messages import BadMessage, pack, unpack
    from core.settings import MAX_CHUNK_DOCS

    keys = [f"{i:064x}" for i in range(MAX_CHUNK_DOCS + 1)]

    assert unpack(pack(keys[:-1])) == keys[:-1]
    with pytest.raises(BadMessage, match="a chunk of 1,001 result keys, more than a message"):
        unpack(pack(keys))


# Small things


@sqlite
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch", ""], "Invalid value for '--batch': it is empty"),
        (["--timeout", "5"], "--timeout is how long --wait waits: give --wait too."),
        (["--meta", "a=1", "--meta", "a=2"], "'a' is given twice ('1' and '2'): keep one"),
        (["--max-tokens", "abc"], "'abc' is not a whole number from 1 to 8,192"),
        (["--prompt", ""], "Invalid value for '--prompt': it is empty: write an instruction."),
    ],
)
def test_submit_refuses_what_it_would_otherwise_ignore_or_misword(env, tmp_path, args, message):
    write(tmp_path / "in", "a.txt", "An article.")

    done = run(env, "submit", str(tmp_path / "in"), *args)

    assert done.exit_code == 2, done.output
    assert message in done.output


@sqlite
def test_requeue_of_a_batch_that_does_not_exist_says_so(env, db, tmp_path):
    write(tmp_path / "in", "a.txt", "An article.")
    run(env, "submit", str(tmp_path / "in"), "--batch", "b")

    done = run(env, "requeue", "nosuch")

    assert done.exit_code == 1
    assert "No batch named 'nosuch'" in done.output


@sqlite
def test_purge_takes_the_time_as_batches_prints_it(env, db, tmp_path):
    write(tmp_path / "in", "a.txt", "An article.")
    run(env, "submit", str(tmp_path / "in"), "--batch", "b")

    done = run(env, "purge", "--before", "2026-01-01 12:30")

    assert done.exit_code == 0, done.output
    assert done.output == "Purged 0 rows and 0 documents.\n"


@sqlite
def test_an_old_doc_file_is_a_failed_row_that_says_to_convert_it(env, db, tmp_path):
    write(tmp_path / "in", "old.doc", b"\xd0\xcf\x11\xe0 an old Word file")

    done = run(env, "submit", str(tmp_path / "in"), "--batch", "b")

    assert done.exit_code == 0, done.output
    assert rows_by_name(db)["old.doc"].error.startswith(
        "an old Word .doc file, which cannot be read"
    )


def test_every_command_and_group_has_an_example_in_its_help():
    import click

    from summarize.cli import main

    def walk(command: click.Command, name: str):
        yield name, command
        for sub, child in getattr(command, "commands", {}).items():
            yield from walk(child, f"{name} {sub}")

    missing = [name for name, command in walk(main, "summarize") if "Example" not in command.help]
    assert missing == []


@pytest.mark.timeout(120)
def test_sigterm_to_submit_wait_stops_the_embedded_redis_it_started(embedded, tmp_path):
    import signal

    from core.broker import EmbeddedRedis, _running, socket_path

    write(tmp_path / "in", "a.txt", "An article nobody summarizes.")
    waiting = subprocess.Popen(
        [*SUMMARIZE, "submit", str(tmp_path / "in"), "--wait"],
        env=os.environ | embedded,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    settings = Settings.from_env(embedded)
    for _ in range(600):  # until it waits: the report is printed
        if waiting.poll() is not None or "waiting for one" in (waiting.stderr.readline() or ""):
            break
    pid = EmbeddedRedis(settings).pid()

    waiting.send_signal(signal.SIGTERM)

    assert waiting.wait(30) == 128 + signal.SIGTERM
    assert pid is not None and not _running(pid)
    assert not socket_path(settings).exists()
