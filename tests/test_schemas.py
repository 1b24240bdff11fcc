"""A --schema batch's summaries: every string and array bounded, and room for the longest answer."""

from __future__ import annotations

import json
from pathlib import Path

from core.settings import Settings
from jobs import schemas
from jobs.prompts import batch_spec

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "schemas"


def test_strings_and_arrays_without_a_bound_get_one_and_bounded_ones_keep_theirs():
    schema = {
        "type": "object",
        "properties": {
            "headline": {"type": "string"},
            "points": {"type": "array", "items": {"type": "string", "maxLength": 80}},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 12},
            "kind": {"type": "string", "enum": ["news", "opinion"]},
            "note": {"type": ["string", "null"], "minLength": 400},
        },
    }

    got = schemas.bounded(schema)["properties"]

    assert got["headline"] == {"type": "string", "maxLength": schemas.STRING_CHARS}
    assert got["points"] == {
        "type": "array",
        "items": {"type": "string", "maxLength": 80},
        "maxItems": schemas.ARRAY_ITEMS,
    }
    assert got["tags"]["maxItems"] == 12 and got["tags"]["items"]["maxLength"] == 300
    assert got["kind"] == {"type": "string", "enum": ["news", "opinion"]}
    assert got["note"]["maxLength"] == 400
    assert "maxLength" not in schema["properties"]["headline"]  # the schema given is not changed


def test_room_is_the_longest_answer_in_tokens():
    points = {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 3}
    schema = {"type": "object", "properties": {"points": points, "n": {"type": "integer"}}}

    # 3 strings of 10 tokens and their quotes, commas and brackets; the keys with theirs
    assert schemas.room(points) == 3 * (10 + 2 + 1) + 2
    assert schemas.room(schema) == (3 + 2 + 41) + (1 + 2 + schemas.SCALAR_TOKENS) + 2
    assert schemas.room({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 90}]}) == 32


def test_a_schema_batch_gets_room_for_its_answer_unless_its_length_is_set():
    key_points = json.loads((SAMPLES / "key-points.json").read_text())

    default = batch_spec(Settings.from_env({}), key_points)
    asked = batch_spec(Settings.from_env({"SUMMARIZE_MAX_TOKENS": "100"}), key_points)
    small = batch_spec(
        Settings.from_env({}), {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    )

    assert default.max_tokens == schemas.room(key_points) == 295  # five points of 160 characters
    assert asked.max_tokens == 100
    assert small.max_tokens == 128  # never below the profile's length
    assert json.loads(default.schema) == schemas.bounded(key_points)
