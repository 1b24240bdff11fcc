"""`summarize run`: submit, a worker and --wait in one process, with every guarantee of the queue.

The first tests run it with the instant engine (`SUMMARIZE_MODEL=echo`); the last with the
real engine and model, including a run killed mid-batch that `summarize worker` finishes.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import sqlalchemy as sa

from core.tables import results
from tests.helpers import summary_line, write
from tests.stack import Worker, cli, copy_lee


def echo_env(tmp_path, redis_url, queue_name) -> dict[str, str]:
    return {
        "SUMMARIZE_DATA_DIR": str(tmp_path / "data"),
        "SUMMARIZE_BROKER_URL": redis_url,
        "SUMMARIZE_QUEUE": queue_name,
        "SUMMARIZE_MODEL": "echo",
    }


def batch_rows(tmp_path, batch: str) -> list[sa.Row]:
    db = sa.create_engine(f"sqlite:///{tmp_path / 'data' / 'summarize.db'}")
    with db.connect() as conn:
        found = conn.execute(sa.select(results).where(results.c.batch == batch)).all()
    db.dispose()
    return found


def test_run_summarizes_a_folder_and_exits_0_when_every_document_succeeded(
    tmp_path, redis_url, queue_name
):
    folder = tmp_path / "corpus"
    write(folder, "a.txt", "Alpha is first. Then beta.")
    write(folder, "b.md", "Gamma rays are bright! Delta follows.")
    env = echo_env(tmp_path, redis_url, queue_name)

    done = cli(env, "run", str(folder), "--batch", "now", timeout_s=120)

    assert done.returncode == 0, done.stderr
    assert "2 of 2 finished: 2 succeeded" in done.stdout
    assert sorted((r.status, r.summary) for r in batch_rows(tmp_path, "now")) == [
        ("succeeded", "Alpha is first."),
        ("succeeded", "Gamma rays are bright!"),
    ]


def test_a_second_run_of_the_same_folder_summarizes_nothing_again(tmp_path, redis_url, queue_name):
    folder = tmp_path / "corpus"
    write(folder, "a.txt", "Alpha is first. Then beta.")
    env = echo_env(tmp_path, redis_url, queue_name)
    assert cli(env, "run", str(folder), "--batch", "first", timeout_s=120).returncode == 0

    again = cli(env, "run", str(folder), "--batch", "again", timeout_s=120)

    assert again.returncode == 0, again.stderr
    assert [(r.status, r.deduplicated) for r in batch_rows(tmp_path, "again")] == [
        ("succeeded", True)
    ]


def test_a_document_that_cannot_be_read_makes_the_run_exit_3_with_its_row(
    tmp_path, redis_url, queue_name
):
    folder = tmp_path / "corpus"
    write(folder, "a.txt", "Alpha is first. Then beta.")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    env = echo_env(tmp_path, redis_url, queue_name)

    done = cli(env, "run", str(folder), "--batch", "mixed", timeout_s=120)

    assert done.returncode == 3, done.stderr
    assert sorted(r.status for r in batch_rows(tmp_path, "mixed")) == ["failed", "succeeded"]


def test_run_takes_submits_options_and_refuses_a_bad_one_before_loading_anything(
    tmp_path, redis_url, queue_name
):
    env = echo_env(tmp_path, redis_url, queue_name)

    refused = cli(env, "run", str(tmp_path), "--prompt", " ")

    assert refused.returncode == 2
    assert "it is empty: write an instruction" in refused.stderr
    assert not (tmp_path / "data" / "summarize.db").exists()


def test_paths_without_a_document_are_said_so_before_any_model_is_loaded(
    tmp_path, redis_url, queue_name
):
    env = echo_env(tmp_path, redis_url, queue_name) | {"SUMMARIZE_MODEL": str(tmp_path / "none")}
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "photo.jpg").write_bytes(b"\xff\xd8")

    missing = cli(env, "run", str(tmp_path / "nowhere"))
    skipped = cli(env, "run", str(tmp_path / "notes"), "--batch", "empty")

    assert missing.returncode == 1
    assert "No path given could be used" in missing.stderr
    assert skipped.returncode == 0, skipped.stderr
    assert summary_line(skipped.stdout, "skipped") == 1
    assert "0 of 0 finished: no documents" in skipped.stdout
    assert "model" not in missing.stderr + skipped.stderr  # no engine was built


@pytest.mark.engine
def test_with_the_real_engine_a_run_is_deduplicated_and_a_killed_one_finished_by_a_worker(
    tmp_path, model, redis_url, queue_name
):
    env = {
        "SUMMARIZE_DATA_DIR": str(tmp_path / "data"),
        "SUMMARIZE_BROKER_URL": redis_url,
        "SUMMARIZE_QUEUE": queue_name,
        "SUMMARIZE_MODEL": str(model),
        "SUMMARIZE_MAX_TOKENS": "32",
        "SUMMARIZE_MAX_MODEL_LEN": "1024",
        "SUMMARIZE_VISIBILITY_TIMEOUT_S": "10",
        "SUMMARIZE_MAX_NUM_SEQS": "4",  # a few at a time: the kill lands mid-batch
        "SUMMARIZE_CHUNK_DOCS": "4",
    }
    assert cli(env, "db", "upgrade").returncode == 0  # its table is read while the run starts
    many = copy_lee(tmp_path / "many", 3, 24)
    with Worker(env, tmp_path / "run.log", str(many), "--batch", "killed", command="run") as run:
        deadline = time.monotonic() + 600
        while not any(r.status == "succeeded" for r in batch_rows(tmp_path, "killed")):
            assert run.process.poll() is None, run.tail()
            assert time.monotonic() < deadline, run.tail()
            time.sleep(0.5)
        os.killpg(run.pid, signal.SIGKILL)
        run.process.wait(30)
    left = [r for r in batch_rows(tmp_path, "killed") if r.status != "succeeded"]
    assert left, "the whole batch finished before the kill: nothing was recovered"

    with Worker(env, tmp_path / "worker.log", "--burst") as worker:
        assert worker.wait(600) == 0, worker.tail()
    found = batch_rows(tmp_path, "killed")
    assert len(found) == 24
    assert {r.status for r in found} == {"succeeded"}

    # The same folder run again with two articles more: only the two are summarized.
    copy_lee(many, 0, 2)
    again = cli(env, "run", str(many), "--batch", "again", timeout_s=600)
    assert again.returncode == 0, again.stderr
    assert "26 of 26 finished: 26 succeeded" in again.stdout
    rows = batch_rows(tmp_path, "again")
    assert sorted((r.deduplicated, r.status) for r in rows) == sorted(
        [(False, "succeeded")] * 2 + [(True, "succeeded")] * 24
    )
    print(f"killed with {len(left)} of 24 unfinished; a worker finished them")
