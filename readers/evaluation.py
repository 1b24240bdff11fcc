"""A batch's summaries scored against summaries people wrote: `summarize eval`.

The references come as JSONL, one document a line: `{"source_path": "...",
"reference": "..."}` (or `"references": [...]`). A line names a document by its path as
submitted (absolute, or relative to where `eval` runs), or by its file name alone when
no other document of the batch has that name. Each summary gets ROUGE-1, ROUGE-2 and
ROUGE-L F-measures (rouge-score, with stemming; against several references, the best),
and so does a lead baseline on the same documents: the document's first sentences, as
many as reach the summaries' mean length in words. A line that cannot be used is a
problem with its line number; the others are scored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import sqlalchemy as sa

from core.quality import sentences
from core.tables import Status, documents, results

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
SIGNALS = ("repetition", "copied", "novel_numbers", "compression")
LOOKUP_ROWS = 500  # paths looked up in one query
MAX_LINE_CHARS = 10_000_000  # a reference line longer than this is refused, not parsed

# How the text of a document is found when the database no longer keeps it: given the
# row's source path and content hash, the text as summarized, or None.
TextOf = Callable[[str, str], "str | None"]
TEXT_GONE = (
    "its text is no longer in the database, and the file is gone or no longer holds the text "
    "summarized: keep texts with SUMMARIZE_KEEP_TEXTS=1, or keep the files"
)


@dataclass(frozen=True)
class Problem:
    """Why one line of the references (or one document) was left out."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass(frozen=True)
class Reference:
    line: int
    name: str
    texts: tuple[str, ...]


@dataclass
class Evaluation:
    """Mean scores of the matched documents' summaries and of the lead baseline."""

    batch: str
    documents: int = 0
    summaries: dict[str, float | None] = field(default_factory=dict)
    lead: dict[str, float | None] = field(default_factory=dict)
    signals: dict[str, float | None] = field(default_factory=dict)
    lead_words: int = 0
    problems: list[Problem] = field(default_factory=list)

    def as_json(self) -> dict:
        return {
            "batch": self.batch,
            "documents": self.documents,
            "summaries": self.summaries,
            "lead": self.lead,
            "signals": self.signals,
            "lead_words": self.lead_words,
            "problems": [{"line": p.line, "reason": p.reason} for p in self.problems],
        }


def read_references(lines: Iterable[str]) -> tuple[list[Reference], list[Problem]]:
    """Each line as a reference, or as the problem that keeps it out."""
    found: list[Reference] = []
    problems: list[Problem] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        parsed = _reference(number, line)
        (found if isinstance(parsed, Reference) else problems).append(parsed)
    return found, problems


def _reference(number: int, line: str) -> Reference | Problem:
    if len(line) > MAX_LINE_CHARS:
        return Problem(number, f"longer than {MAX_LINE_CHARS:,} characters: not read")
    try:
        record = json.loads(line)
    except ValueError as exc:
        return Problem(number, f"not JSON ({exc})")
    if not isinstance(record, dict):
        return Problem(number, 'not a JSON object: write {"source_path": ..., "reference": ...}')
    name = record.get("source_path")
    if not isinstance(name, str) or not name.strip():
        return Problem(number, 'no "source_path": name the document as submitted, or its file')
    texts = record.get("references", record.get("reference"))
    if isinstance(texts, str):
        texts = [texts]
    if (
        not isinstance(texts, list)
        or not texts
        or not all(isinstance(t, str) and t.strip() for t in texts)
    ):
        return Problem(number, 'no "reference" text (or "references": a list of texts)')
    return Reference(number, name.strip(), tuple(texts))


def evaluate(db: sa.Engine, batch: str, lines: Iterable[str], text_of: TextOf) -> Evaluation:
    """Score the batch's summaries of the documents the lines name, beside the lead baseline.

    `text_of` finds a document's text when the database dropped it (see TextOf)."""
    references, problems = read_references(lines)
    scored, more = summarized(db, batch, references, text_of)
    found = Evaluation(batch, problems=sorted(problems + more, key=lambda p: p.line))
    if scored:
        found.documents = len(scored)
        found.summaries, found.lead, found.lead_words = score(
            [(ref.texts, row.summary, text) for ref, row, text in scored]
        )
        found.signals = _signals([row for _, row, _ in scored])
    return found


def summarized(db: sa.Engine, batch: str, references: list[Reference], text_of: TextOf):
    """The references whose documents the batch summarized, as (reference, row, text), and
    the problems of the others."""
    rows, problems = _match(db, batch, references)
    scored = []
    for reference, row in rows:
        if row.status != Status.SUCCEEDED or row.summary is None:
            why = f": {row.error}" if row.error else ""
            problems.append(
                Problem(reference.line, f"{reference.name} has no summary ({row.status}{why})")
            )
            continue
        text = _text(row, text_of, reference.line)
        if isinstance(text, Problem):
            problems.append(text)
            continue
        scored.append((reference, row, text))
    return scored, problems


def score(items: list[tuple[tuple[str, ...], str, str]]):
    """Mean ROUGE F-measures of the summaries and of the lead, and the lead's length in words,
    for (references, summary, document text) triples."""
    lead_words = lead_length([summary for _, summary, _ in items])
    summaries = each_score([(references, summary) for references, summary, _ in items])
    leads = each_score([(references, lead(text, lead_words)) for references, _, text in items])
    return means(summaries), means(leads), lead_words


def lead_length(summaries: list[str]) -> int:
    """The lead baseline's length: the summaries' mean length in words."""
    return max(1, round(sum(len(_words(s)) for s in summaries) / len(summaries)))


def each_score(pairs: list[tuple[tuple[str, ...], str]]) -> list[dict[str, float]]:
    """Each (references, text) pair's ROUGE F-measures (against several, the best)."""
    from rouge_score.rouge_scorer import RougeScorer

    scorer = RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    found = []
    for references, text in pairs:
        scores = scorer.score_multi(list(references), text)
        found.append({kind: scores[kind].fmeasure for kind in ROUGE_TYPES})
    return found


def lead(text: str, words: int) -> str:
    """The text's first sentences, as many as reach `words` words (at least one)."""
    taken: list[str] = []
    for sentence in sentences(text):
        taken += sentence
        if len(taken) >= words:
            break
    return " ".join(taken)


def _words(text: str) -> list[str]:
    return [w for s in sentences(text) for w in s]


def means(scores: list[dict[str, float]]) -> dict[str, float]:
    return {kind: sum(s[kind] for s in scores) / len(scores) for kind in ROUGE_TYPES}


def _signals(rows: list) -> dict[str, float | None]:
    means: dict[str, float | None] = {}
    for name in SIGNALS:
        values = [getattr(row, name) for row in rows if getattr(row, name) is not None]
        means[name] = sum(values) / len(values) if values else None
    means["looped"] = sum(bool(row.looped) for row in rows) / len(rows)
    means["truncated"] = sum(row.finish_reason == "length" for row in rows) / len(rows)
    return means


def _match(db: sa.Engine, batch: str, references: list[Reference]) -> tuple[list, list[Problem]]:
    """Each reference with the batch's row it names (by path, else by a unique file name)."""
    problems: list[Problem] = []
    wanted = {}  # path as stored -> reference
    for reference in references:
        for path in {reference.name, os.path.abspath(reference.name)}:
            wanted.setdefault(path, reference)
    columns = [
        results.c.source_path,
        results.c.status,
        results.c.summary,
        results.c.error,
        results.c.content_hash,
        results.c.finish_reason,
        results.c.looped,
        *(results.c[name] for name in SIGNALS),
        documents.c.body,  # NULL once dropped: then `text_of` reads the file
    ]
    with_text = results.outerjoin(documents, documents.c.content_hash == results.c.content_hash)
    by_path = {}
    paths = list(wanted)
    with db.connect() as conn:
        for start in range(0, len(paths), LOOKUP_ROWS):
            chunk = paths[start : start + LOOKUP_ROWS]
            query = (
                sa.select(*columns)
                .select_from(with_text)
                .where(results.c.batch == batch, results.c.source_path.in_(chunk))
            )
            for row in conn.execute(query):
                by_path[row.source_path] = row
        found = {}  # reference line -> row
        for reference in references:
            for path in (reference.name, os.path.abspath(reference.name)):
                if path in by_path:
                    found[reference.line] = by_path[path]
                    break
        names = {r.name for r in references if r.line not in found and "/" not in r.name}
        named: dict[str, list] = {}
        if names:
            everyone = sa.select(*columns).select_from(with_text).where(results.c.batch == batch)
            for row in conn.execute(everyone):
                name = row.source_path.rsplit("/", 1)[-1]
                if name in names:
                    named.setdefault(name, []).append(row)
    matched, seen = [], {}
    for reference in references:
        row = found.get(reference.line)
        if row is None:
            rows = named.get(reference.name, [])
            if len(rows) > 1:
                problems.append(
                    Problem(
                        reference.line,
                        f"{len(rows)} documents of {batch} are named {reference.name}: "
                        "give the path as submitted",
                    )
                )
                continue
            if not rows:
                problems.append(Problem(reference.line, f"no document {reference.name} in {batch}"))
                continue
            row = rows[0]
        if row.source_path in seen:
            problems.append(
                Problem(
                    reference.line,
                    f"{reference.name} was named by line {seen[row.source_path]} already",
                )
            )
            continue
        seen[row.source_path] = reference.line
        matched.append((reference, row))
    return matched, problems


def _text(row, text_of: TextOf, line: int) -> str | Problem:
    """The document's text as it was summarized: from the database (read with the row), else
    from `text_of`."""
    if row.content_hash is None:
        return Problem(line, f"{row.source_path} has no text")
    if row.body is not None:
        return row.body
    text = text_of(row.source_path, row.content_hash)
    return Problem(line, f"{row.source_path}: {TEXT_GONE}") if text is None else text


def report(found: Evaluation) -> str:
    """The scores as a small table for a terminal, with the signals' means under it."""
    lines = [
        f"{found.batch}: {found.documents:,} documents scored"
        + (f", {len(found.problems):,} lines left out" if found.problems else ""),
        "",
        f"{'':<11}{'ROUGE-1':>9}{'ROUGE-2':>9}{'ROUGE-L':>9}",
    ]
    for label, scores in (
        ("summaries", found.summaries),
        (f"lead {found.lead_words}w", found.lead),
    ):
        lines.append(f"{label:<11}" + "".join(f"{scores[k]:>9.3f}" for k in ROUGE_TYPES))
    s = found.signals
    shown = [
        f"repetition {_figure(s['repetition'])}",
        f"copied {_figure(s['copied'])}",
        f"novel numbers {_figure(s['novel_numbers'])}",
        f"compression {_figure(s['compression'])}",
        f"looped {s['looped']:.0%}",
        f"cut at the length cap {s['truncated']:.0%}",
    ]
    lines += ["", "signals (means): " + ", ".join(shown)]
    return "\n".join(lines)


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
