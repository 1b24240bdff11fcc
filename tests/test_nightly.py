"""scripts/nightly: tonight's batch, a deadline, and exit statuses cron can act on."""

from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import date
from pathlib import Path

import pytest

from tests.helpers import write

NIGHTLY = Path(__file__).resolve().parents[1] / "scripts" / "nightly"
pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def nightly(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(NIGHTLY), *args], env=os.environ | env, capture_output=True, text=True, timeout=300
    )


def test_a_failing_document_exits_3_with_the_batch_named(env, tmp_path):
    write(tmp_path / "in", "empty.txt", "")
    done = nightly(env, str(tmp_path / "in"))
    tonight = f"nightly-{date.today():%Y-%m-%d}"
    assert done.returncode == 3
    assert f"nightly: submitting {tmp_path / 'in'} as {tonight}" in done.stderr
    assert f"nightly: {tonight}: some documents failed after" in done.stderr
    assert done.stdout == ""
    assert all(
        re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ nightly: ", line)
        for line in done.stderr.splitlines()
    )


def test_a_deadline_that_passes_exits_4(env, tmp_path):
    write(tmp_path / "in", "a.txt", "No worker runs tonight.")
    done = nightly(env, str(tmp_path / "in"), "--deadline", "2s")
    assert done.returncode == 4
    assert "the deadline passed first" in done.stderr


def test_a_folder_that_does_not_exist_exits_1(env, tmp_path):
    done = nightly(env, str(tmp_path / "typo"))
    assert done.returncode == 1
    assert "No path given could be used" in done.stderr


def test_redis_down_exits_5_and_says_what_to_do(env, tmp_path):
    write(tmp_path / "in", "a.txt", "Text.")
    done = nightly(env | {"SUMMARIZE_BROKER_URL": "redis://127.0.0.1:1/0"}, str(tmp_path / "in"))
    assert done.returncode == 5
    assert "Error: Redis is not reachable at redis://127.0.0.1:1/0" in done.stderr
    assert "Redis, the database or object storage could not be reached" in done.stderr


def test_running_twice_the_same_night_does_no_work_twice(env, tmp_path):
    write(tmp_path / "in", "a.txt", "Once.")
    first = nightly(env, str(tmp_path / "in"), "--deadline", "1s")
    second = nightly(env, str(tmp_path / "in"), "--deadline", "1s")
    tonight = f"nightly-{date.today():%Y-%m-%d}"
    assert first.returncode == second.returncode == 4
    assert re.search(r"nightly:   queued\s+1$", first.stderr, re.M)
    assert re.search(r"nightly:   queued\s+0$", second.stderr, re.M)
    assert re.search(r"nightly:   already in batch\s+1$", second.stderr, re.M)
    assert f"nightly: Batch {tonight}" in second.stderr


def test_a_bad_deadline_is_refused(env, tmp_path):
    done = nightly(env, str(tmp_path), "--deadline", "soon")
    assert done.returncode == 2
    assert "'soon' is not a duration such as 90m, 6h or 3600s" in done.stderr


def test_every_other_option_is_passed_to_submit(env, tmp_path):
    write(tmp_path / "in", "tickets.csv", "ticket,body\nT-1,\n")  # its one record is empty

    done = nightly(env, str(tmp_path / "in"), "--text-field", "body", "--deadline", "30")

    assert done.returncode == 3, done.stderr
    assert "line 2: empty text: nothing to summarize" in done.stderr
    assert "no column 'text'" not in done.stderr


def test_a_finished_batch_is_handed_to_a_url_and_a_refused_one_exits_5(env, tmp_path, bucket):
    write(tmp_path / "in", "empty.txt", "")
    env = env | bucket.env
    tonight = f"nightly-{date.today():%Y-%m-%d}"

    done = nightly(
        env,
        str(tmp_path / "in"),
        "--export-to",
        bucket.url("out/{batch}.jsonl"),
        "--export-format",
        "jsonl",
    )
    refused = nightly(
        env, str(tmp_path / "in"), "--export-to", "s3://no-such-bucket-here/{batch}.csv"
    )

    assert done.returncode == 3, done.stderr
    assert (
        f"{tonight}: results written to {bucket.url(f'out/{tonight}.jsonl')} (jsonl)" in done.stderr
    )
    (row,) = [json.loads(line) for line in bucket.get(f"out/{tonight}.jsonl").splitlines()]
    assert (row["source_path"], row["status"]) == (str(tmp_path / "in" / "empty.txt"), "failed")
    assert refused.returncode == 5
    assert "Could not write s3://no-such-bucket-here/" in refused.stderr
    assert (
        f"{tonight}: the export to s3://no-such-bucket-here/{tonight}.csv failed (exit 5)"
        in refused.stderr
    )
    assert bucket.keys() == [f"out/{tonight}.jsonl"]


def test_a_batch_past_its_deadline_is_not_exported(env, tmp_path, bucket):
    write(tmp_path / "in", "a.txt", "No worker runs tonight.")

    done = nightly(
        env | bucket.env,
        str(tmp_path / "in"),
        "--deadline",
        "1s",
        "--export-to",
        bucket.url("x.parquet"),
    )

    assert done.returncode == 4
    assert bucket.keys() == []
