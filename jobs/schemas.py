"""How long a `--schema` batch's JSON summaries may be. Every string and array the schema leaves
unbounded gets a bound (the grammar then cannot let a string run on to the length cap), and
the summaries get room for the longest answer the schema allows unless `--max-tokens` says
otherwise: at the profile's 128 tokens, most summaries of a five-point schema were cut inside
a string, their JSON never closed."""

from __future__ import annotations

import json

STRING_CHARS = 300  # a string the schema leaves unbounded: about two sentences
ARRAY_ITEMS = 8  # an array the schema leaves unbounded
CHARS_PER_TOKEN = 3  # JSON text, on the safe side (English prose runs nearer 4)
SCALAR_TOKENS = 8  # a number, a boolean or null
UNSIZED_TOKENS = 256  # a part whose size cannot be told ($ref, additionalProperties)
_BRANCHES = ("anyOf", "oneOf", "allOf")


def bounded(schema: dict) -> dict:
    """A copy of `schema` with `maxLength` on every string and `maxItems` on every array that
    had none (STRING_CHARS, ARRAY_ITEMS; never below its `minLength` or `minItems`)."""
    if not isinstance(schema, dict):
        return schema
    node = {key: _below(key, value) for key, value in schema.items()}
    types = _types(node)
    if "string" in types and not {"maxLength", "enum", "const"} & node.keys():
        node["maxLength"] = max(STRING_CHARS, node.get("minLength", 0))
    if "array" in types and not {"maxItems", "enum", "const"} & node.keys():
        node["maxItems"] = max(ARRAY_ITEMS, node.get("minItems", 0))
    return node


def _below(key: str, value):
    """A keyword's value with the schemas it holds bounded."""
    if key in ("properties", "$defs", "definitions", "patternProperties"):
        return (
            {name: bounded(sub) for name, sub in value.items()}
            if isinstance(value, dict)
            else value
        )
    if key in ("items", "additionalProperties", "not", "if", "then", "else"):
        return [bounded(sub) for sub in value] if isinstance(value, list) else bounded(value)
    if key in (*_BRANCHES, "prefixItems"):
        return [bounded(sub) for sub in value] if isinstance(value, list) else value
    return value


def room(schema: dict) -> int:
    """About how many tokens the longest JSON value `schema` allows takes (a bounded schema:
    see `bounded`)."""
    if not isinstance(schema, dict):
        return UNSIZED_TOKENS if schema is not False else 0
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        return max((_tokens(json.dumps(v)) for v in values), default=1)
    if branches := [sub for key in _BRANCHES for sub in schema.get(key, [])]:
        return max(room(sub) for sub in branches)
    if "$ref" in schema:
        return UNSIZED_TOKENS
    sizes = [_room_of(kind, schema) for kind in _types(schema) or ["object"]]
    return max(sizes)


def _room_of(kind: str, schema: dict) -> int:
    if kind == "string":
        return _tokens("x" * schema.get("maxLength", STRING_CHARS)) + 2  # and its quotes
    if kind == "array":
        fixed = schema.get("prefixItems", [])
        items = schema.get("items", {})
        count = max(schema.get("maxItems", ARRAY_ITEMS) - len(fixed), 0)
        each = room(items) if items is not False else 0
        return sum(room(sub) + 1 for sub in fixed) + count * (each + 1) + 2
    if kind == "object":
        fields = schema.get("properties", {})
        size = sum(_tokens(json.dumps(name)) + 2 + room(sub) for name, sub in fields.items())
        extra = schema.get("additionalProperties", True)
        return size + (UNSIZED_TOKENS if extra is not False and not fields else 0) + 2
    return SCALAR_TOKENS  # number, integer, boolean, null


def _types(schema: dict) -> list[str]:
    kind = schema.get("type", [])
    return [kind] if isinstance(kind, str) else list(kind)


def _tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)
