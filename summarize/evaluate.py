"""`summarize eval`: one batch's summaries scored against references, or several compared."""

from __future__ import annotations

import json

import click

from core.errors import SummarizeError
from readers.terminal import say
from summarize.manage import database_of, known


@click.command("eval")
@click.argument("batches", nargs=-1, required=True, metavar="BATCH...")
@click.option(
    "--references",
    "references",
    required=True,
    type=click.File("r", encoding="utf-8"),
    metavar="FILE",
    help='JSONL: {"source_path": ..., "reference": ...} a line ("references": [...] for several).',
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.pass_context
def evaluate(ctx, batches: tuple[str, ...], references, as_json: bool) -> None:
    """Score a batch's summaries against reference summaries, beside a lead baseline; or
    compare several batches of the same documents.

    Prints ROUGE-1, ROUGE-2 and ROUGE-L F-measures (with stemming) of the
    summaries and of the documents' first sentences cut to the summaries' mean
    length, on the same documents, with the means of the quality signals. A
    line names its document by the path as submitted, or by the file's name
    when no other document of the batch has it. Lines that match no summary
    are listed on standard error; the rest are scored.

    Given several batches (the same documents under another model, prompt or
    setting), it scores them on the documents all of them summarized, beside
    one lead baseline, and gives each later batch's difference from the first
    with a 95% paired bootstrap interval: "better" or "worse" when the interval
    leaves out zero, "not clearly different" when it does not.

    \b
    Example:
      summarize eval nightly-2026-11-29 --references labelled.jsonl --json
      summarize eval papers-smollm papers-qwen --references papers-refs.jsonl
    """
    if len(set(batches)) < len(batches):
        raise click.UsageError("A batch is named twice: name each batch to compare once.")
    settings, db = database_of(ctx)
    for batch in batches:
        known(db, batch)
    if len(batches) == 1:
        _one(db, batches[0], references, _text_of(settings), as_json)
    else:
        _several(db, list(batches), references, _text_of(settings), as_json)


def _one(db, batch: str, references, text_of, as_json: bool) -> None:
    from readers import evaluation

    found = evaluation.evaluate(db, batch, references, text_of)
    for problem in found.problems:
        say(f"{references.name}: {problem}", err=True)
    if not found.documents:
        raise SummarizeError(
            f"No line of {references.name} names a summarized document of {batch}: name each "
            "by its path as submitted (see `summarize results --batch NAME`) or its file name."
        )
    if as_json:
        click.echo(json.dumps(found.as_json(), indent=2))
    else:
        say(evaluation.report(found))


def _several(db, batches: list[str], references, text_of, as_json: bool) -> None:
    from readers import comparison

    found = comparison.compare(db, batches, references, text_of)
    for batch, problems in found.problems.items():
        for problem in problems:
            say(f"{references.name} ({batch}): {problem}", err=True)
    if not found.documents:
        raise SummarizeError(
            f"No line of {references.name} names a document every batch summarized "
            f"({', '.join(batches)}): compare batches of the same documents."
        )
    if as_json:
        click.echo(json.dumps(found.as_json(), indent=2))
    else:
        say(comparison.report(found))


def _text_of(settings):
    """A document's text read again from its file, if it is still the text summarized."""
    from jobs import corpus
    from jobs.documents import Text

    def text_of(path: str, content_hash: str) -> str | None:
        read = corpus.read(path, settings.max_doc_bytes)
        if isinstance(read, Text) and read.content_hash == content_hash:
            return read.body
        return None

    return text_of
