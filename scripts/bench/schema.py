"""schema: the corpus summarized as JSON of a schema (`summarize run --schema`, the real engine,
default settings), and how many summaries parse and validate against it."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from scripts.bench.common import ROOT, SUMMARIZE, measured

SCHEMA = ROOT / "samples" / "schemas" / "key-points.json"


def run(args) -> dict:
    """Every document of --corpus (the first --docs) in one `summarize run`, a data folder of
    its own; then each summary parsed as JSON and checked against the schema."""
    import sqlalchemy as sa
    from jsonschema import Draft202012Validator

    from core.tables import results

    schema_file = Path(args.schema or SCHEMA)
    work = Path(tempfile.mkdtemp(prefix="summarize-schema-"))
    corpus = work / "corpus"
    corpus.mkdir()
    sources = sorted(p for p in Path(args.corpus).iterdir() if p.is_file())[: args.docs]
    for path in sources:
        shutil.copy(path, corpus / path.name)
    env = os.environ | {
        "SUMMARIZE_DATA_DIR": str(work / "data"),
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    }
    try:
        command = [
            *SUMMARIZE,
            "run",
            str(corpus),
            "--batch",
            "schema",
            "--schema",
            str(schema_file),
        ]
        took = measured(command, env, work / "run.log")
        db = sa.create_engine(f"sqlite:///{work / 'data' / 'summarize.db'}")
        with db.connect() as conn:
            rows = conn.execute(
                sa.select(
                    results.c.summary, results.c.finish_reason, results.c.completion_tokens
                ).where(results.c.batch == "schema", results.c.status == "succeeded")
            ).all()
        db.dispose()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    validator = Draft202012Validator(json.loads(schema_file.read_text()))
    whole = valid = 0
    for row in rows:
        try:
            answer = json.loads(row.summary)
        except ValueError:
            continue
        whole += 1
        valid += validator.is_valid(answer)
    return {
        "mode": "schema",
        "schema": schema_file.name,
        "docs": len(rows),
        "parsed": whole,
        "valid": valid,
        "cut": sum(row.finish_reason == "length" for row in rows),
        "completion_tokens": sum(row.completion_tokens or 0 for row in rows),
        "seconds": took["seconds"],
    }


def report(result: dict) -> None:
    docs = result["docs"] or 1
    print(
        f"schema    {result['docs']:>5} summaries as JSON of {result['schema']}: "
        f"{result['parsed']} parse ({result['parsed'] / docs:.1%}), {result['valid']} valid "
        f"({result['valid'] / docs:.1%}), {result['cut']} ended at the length cap; "
        f"{result['completion_tokens']:,} output tokens; `summarize run` {result['seconds']:.1f} s",
        flush=True,
    )
