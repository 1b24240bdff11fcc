"""The prompt a batch's documents are summarized with: the model, the instruction, the
summary's length and sentence limit, and a JSON schema; and a schema file, checked before
anything is queued under it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property

from core.errors import SummarizeError
from core.files import read_named
from core.prompt import prompt_hash
from core.settings import Settings
from jobs.documents import Text


@dataclass(frozen=True)
class Prompt:
    """What a document is summarized with: a batch's, or a record's own (an OpenAI request's
    system message and max_tokens)."""

    model: str
    instruction: str
    max_tokens: int
    max_sentences: int = 0  # 0: no limit
    schema: str | None = None  # JSON schema text (submit --schema)

    @cached_property  # read for every document's key and row: worked out once per prompt
    def hash(self) -> str:
        return prompt_hash(self.instruction, self.max_tokens, self.max_sentences, self.schema)

    @property
    def row(self) -> dict:
        """As a row of `prompts`, which the worker reads a row's prompt from."""
        return {
            "prompt_hash": self.hash,
            "instruction": self.instruction,
            "max_tokens": self.max_tokens,
            "max_sentences": self.max_sentences or None,
            "schema": self.schema,
        }

    @classmethod
    def from_settings(cls, settings: Settings, schema: dict | None = None) -> Prompt:
        """The batch's prompt; with a JSON schema, the instruction asks for JSON of it and no
        sentence limit applies (a full stop inside a JSON string must not end it)."""
        if schema is None:
            instruction = settings.instruction
            return cls(
                settings.model_name,
                instruction,
                settings.summary_max_tokens,
                settings.sentences_for(instruction),
            )
        text = json.dumps(schema, ensure_ascii=False, sort_keys=True)
        instruction = f"{settings.instruction}\n\n{SCHEMA_NOTE}"
        return cls(settings.model_name, instruction, settings.summary_max_tokens, 0, text)

    def of(self, item: Text, settings: Settings) -> Prompt:
        """The prompt of one document: this one, or with the record's instruction and length."""
        if item.instruction is None and item.max_tokens is None:
            return self
        instruction = item.instruction or self.instruction
        if item.instruction and self.schema:
            instruction = f"{instruction}\n\n{SCHEMA_NOTE}"
        own_limit = settings.sentences_for(instruction) if not self.schema else 0
        return Prompt(
            self.model,
            instruction,
            item.max_tokens or self.max_tokens,
            own_limit if item.instruction else self.max_sentences,
            self.schema,
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
