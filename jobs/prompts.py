"""The spec a batch's documents are summarized with (its instruction, the summary's length
and sentence limit, and a JSON schema), a record's own; and a schema file, checked before
anything is queued under it."""

from __future__ import annotations

import json
import os

from core.errors import SummarizeError
from core.files import read_named
from core.prompt import SummarySpec
from core.settings import Settings
from jobs import schemas
from jobs.documents import Text


def batch_spec(settings: Settings, schema: dict | None = None) -> SummarySpec:
    """The batch's spec; with a JSON schema, the instruction asks for JSON of it, no sentence
    limit applies (a full stop inside a JSON string must not end it), every string and array
    is bounded, and the summary has room for the longest answer (jobs/schemas.py) unless
    SUMMARIZE_MAX_TOKENS or --max-tokens sets its length."""
    if schema is None:
        instruction = settings.instruction
        return SummarySpec(
            instruction, settings.summary_max_tokens, settings.sentences_for(instruction)
        )
    schema = schemas.bounded(schema)
    text = json.dumps(schema, ensure_ascii=False, sort_keys=True)
    instruction = f"{settings.instruction}\n\n{SCHEMA_NOTE}"
    length = settings.summary_max_tokens
    if settings.max_tokens is None:  # at most half the context: the document needs the rest
        length = max(length, min(schemas.room(schema), settings.profile.max_model_len // 2))
    return SummarySpec(instruction, length, None, text)


def spec_of(item: Text, batch: SummarySpec, settings: Settings) -> SummarySpec:
    """The spec of one document: the batch's, or with the record's own instruction and length
    (an OpenAI request's system message and max_tokens)."""
    if item.instruction is None and item.max_tokens is None:
        return batch
    instruction = item.instruction or batch.instruction
    if item.instruction and batch.schema:
        instruction = f"{instruction}\n\n{SCHEMA_NOTE}"
    own_limit = settings.sentences_for(instruction) if not batch.schema else None
    return SummarySpec(
        instruction,
        item.max_tokens or batch.max_tokens,
        own_limit if item.instruction else batch.max_sentences,
        batch.schema,
    )


# Added to a --schema batch's instruction. The grammar makes the JSON valid and spells its keys;
# the schema itself is not shown to the model: SmolLM2-135M given it wrote its words ("title",
# "properties") as key points for 2 of 3 lee-background articles, and 0 of 3 without it.
SCHEMA_NOTE = "Answer in JSON."


MAX_SCHEMA_DEPTH = 32  # objects and arrays inside each other; a summary's schema needs a few


def read_schema(path: str | os.PathLike) -> dict:
    """A JSON schema from a file (read as core/files.py reads option files), refused with the
    reason unless it is valid under the JSON Schema meta-schema and at most MAX_SCHEMA_DEPTH
    deep: a schema every document would fail on is refused now, not a night later."""
    from jsonschema import exceptions, validators

    named = f"--schema={os.fspath(path)!r}"
    text = read_named(path, "--schema", "a JSON schema")
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SummarizeError(f"{named} is not JSON ({exc}): give a JSON schema file.") from None
    except RecursionError:
        schema = None  # nested past Python's own limit: refused below
    if schema is not None and (
        not isinstance(schema, dict) or not ({"type", "properties", "$ref", "anyOf"} & set(schema))
    ):
        raise SummarizeError(
            f"{named} is not a JSON schema (an object with `type` and `properties`, e.g. "
            '{"type": "object", "properties": {"points": {"type": "array"}}}).'
        )
    if schema is None or _depth(schema) > MAX_SCHEMA_DEPTH:
        raise SummarizeError(
            f"{named} is nested more than {MAX_SCHEMA_DEPTH} deep: a summary's schema needs a "
            "few levels; flatten it."
        )
    try:
        validators.validator_for(schema).check_schema(schema)
    except exceptions.SchemaError as exc:
        where = "/".join(map(str, exc.path)) or "the top"
        reason = " ".join(exc.message.split())[:300]
        raise SummarizeError(
            f"{named} is not a valid JSON schema: {reason} (at {where}): see "
            "https://json-schema.org/understanding-json-schema/"
        ) from None
    except RecursionError:  # a pattern nested past what Python's regular expressions parse
        raise SummarizeError(f"{named} holds a pattern nested too deeply: simplify it.") from None
    return schema


def _depth(value: object) -> int:
    """How deep objects and arrays nest in a JSON value, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack and deepest <= MAX_SCHEMA_DEPTH:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return deepest
