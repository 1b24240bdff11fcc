"""Files and numbers given by options and settings: a bad one is refused with the reason and
the fix, at once; none hangs, fills memory or ends in a traceback."""

from __future__ import annotations

import json
import os

import pytest

from core.errors import SettingsError
from core.settings import Settings
from tests.helpers import run, write

sqlite = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@sqlite
@pytest.mark.timeout(60)
@pytest.mark.parametrize("option", ["--schema", "--prompt-file"])
def test_a_fifo_or_a_device_named_by_an_option_is_refused_without_waiting(env, tmp_path, option):
    write(tmp_path / "in", "a.txt", "Alpha.")
    os.mkfifo(tmp_path / "pipe")

    fifo = run(env, "submit", str(tmp_path / "in"), option, str(tmp_path / "pipe"))
    zero = run(env, "submit", str(tmp_path / "in"), option, "/dev/zero")

    assert fifo.exit_code == 1
    assert (
        f"Error: {option}='{tmp_path / 'pipe'}' is not a regular file: point it at" in fifo.output
    )
    assert zero.exit_code == 1 and "'/dev/zero' is not a regular file" in zero.output


@pytest.mark.timeout(60)
def test_a_prompt_file_setting_that_is_a_fifo_or_too_large_is_refused(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    large = write(tmp_path, "large.txt", "word " * 30_000)

    with pytest.raises(SettingsError, match="SUMMARIZE_PROMPT_FILE=.* is not a regular file"):
        Settings.from_env({"SUMMARIZE_PROMPT_FILE": str(tmp_path / "pipe")})
    with pytest.raises(SettingsError, match=r"is larger than 100,000 bytes: the instruction must"):
        Settings.from_env({"SUMMARIZE_PROMPT_FILE": str(large)})


@sqlite
@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        (
            {"type": "objekt", "properties": {}},
            "is not a valid JSON schema: 'objekt' is not valid under any of the given schemas "
            "(at type)",
        ),
        (
            {"type": "object", "properties": {"n": {"type": "integer", "minimum": "one"}}},
            "is not a valid JSON schema: 'one' is not of type 'number' (at properties/n/minimum)",
        ),
        (
            {"type": "object", "properties": {"a": json.loads("[" * 40 + "]" * 40)}},
            "is nested more than 32 deep",
        ),
    ],
    ids=["unknown type", "bad keyword value", "deep"],
)
def test_a_schema_is_checked_against_the_meta_schema_at_submit(env, tmp_path, schema, reason):
    write(tmp_path / "in", "a.txt", "Alpha.")
    path = write(tmp_path, "schema.json", json.dumps(schema))

    done = run(env, "submit", str(tmp_path / "in"), "--schema", str(path))

    assert done.exit_code == 1, done.output
    assert done.output.startswith(f"Error: --schema='{path}' {reason}"), done.output


@sqlite
def test_a_schema_nested_past_pythons_own_limit_is_refused_not_a_traceback(env, tmp_path):
    write(tmp_path / "in", "a.txt", "Alpha.")
    path = write(
        tmp_path, "schema.json", '{"type": "object", "x": ' + "[" * 20_000 + "]" * 20_000 + "}"
    )

    done = run(env, "submit", str(tmp_path / "in"), "--schema", str(path))

    assert done.exit_code == 1
    assert f"Error: --schema='{path}' is nested more than 32 deep" in done.output


@sqlite
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--expire-after", "1e9d"], "'1e9d' is longer than the most, 366d"),
        (["--expire-after", "nan"], "'nan' is not a duration"),
        (["--wait", "--timeout", "nan"], "'nan' is not from 0 to 2,678,400 seconds"),
        (["--wait", "--timeout", "1e300"], "'1e300' is not from 0 to 2,678,400 seconds"),
    ],
)
def test_a_number_or_duration_out_of_range_is_refused_with_the_range(env, tmp_path, args, message):
    write(tmp_path / "in", "a.txt", "Alpha.")

    done = run(env, "submit", str(tmp_path / "in"), *args)

    assert done.exit_code == 2, done.output
    assert message in done.output


@sqlite
@pytest.mark.parametrize(
    "args",
    [
        ["status", "--latest", "-5"],
        ["batches", "--latest", "0"],
        ["requeue", "--older-than", "inf"],
    ],
)
def test_listing_and_requeue_numbers_out_of_range_are_refused(env, args):
    done = run(env, *args)

    assert done.exit_code == 2 and "Invalid value for" in done.output, done.output
