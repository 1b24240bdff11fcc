"""Batches compared on the same documents: `summarize eval A B … --references FILE`.

Each batch is scored as `summarize eval` scores one (readers/evaluation.py), on the documents
every batch summarized, beside one lead baseline for all (cut to the mean length of all their
summaries). Each later batch's difference from the first comes with a paired bootstrap
interval: the documents are drawn again with replacement RESAMPLES times, each draw's mean
difference is taken, and the interval holds the middle CONFIDENCE of them. An interval that
does not hold zero says the difference is not the luck of which documents were scored.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import sqlalchemy as sa

from readers.evaluation import (
    ROUGE_TYPES,
    Problem,
    TextOf,
    each_score,
    lead,
    lead_length,
    means,
    read_references,
    summarized,
)

RESAMPLES = 1000
CONFIDENCE = 0.95
SEED = 0  # the same references and summaries give the same intervals


@dataclass(frozen=True)
class Difference:
    """One ROUGE type's mean difference (a batch's minus the first's) and its interval."""

    mean: float
    low: float
    high: float

    @property
    def verdict(self) -> str:
        if self.low > 0:
            return "better"
        if self.high < 0:
            return "worse"
        return "not clearly different"


@dataclass
class Comparison:
    batches: list[str]
    documents: int = 0
    summaries: dict[str, dict[str, float]] = field(default_factory=dict)  # batch: means
    lead: dict[str, float] = field(default_factory=dict)
    lead_words: int = 0
    differences: dict[str, dict[str, Difference]] = field(default_factory=dict)  # later batches'
    problems: dict[str, list[Problem]] = field(default_factory=dict)  # batch: its lines left out

    def as_json(self) -> dict:
        return {
            "batches": self.batches,
            "documents": self.documents,
            "summaries": self.summaries,
            "lead": self.lead,
            "lead_words": self.lead_words,
            "differences": {
                batch: {kind: vars(d) | {"verdict": d.verdict} for kind, d in by_kind.items()}
                for batch, by_kind in self.differences.items()
            },
            "against": self.batches[0],
            "resamples": RESAMPLES,
            "confidence": CONFIDENCE,
            "problems": {
                batch: [{"line": p.line, "reason": p.reason} for p in problems]
                for batch, problems in self.problems.items()
            },
        }


def compare(db: sa.Engine, batches: list[str], lines: Iterable[str], text_of: TextOf) -> Comparison:
    """Score each batch on the documents all of them summarized, and each later batch against
    the first."""
    references, problems = read_references(lines)
    found = Comparison(batches, problems={batch: list(problems) for batch in batches})
    each = {}
    for batch in batches:
        scored, more = summarized(db, batch, references, text_of)
        found.problems[batch] += more
        each[batch] = {reference.line: (reference, row, text) for reference, row, text in scored}
    common = sorted(set.intersection(*(set(scored) for scored in each.values())))
    for batch in batches:
        found.problems[batch] += [
            Problem(line, f"{ref.name}: not summarized by every batch compared: left out")
            for line, (ref, _, _) in each[batch].items()
            if line not in common
        ]
        found.problems[batch].sort(key=lambda p: p.line)
    if not common:
        return found
    found.documents = len(common)
    first = each[batches[0]]
    found.lead_words = lead_length([each[b][line][1].summary for b in batches for line in common])
    leads = [(first[line][0].texts, lead(first[line][2], found.lead_words)) for line in common]
    found.lead = means(each_score(leads))
    scores = {
        batch: each_score(
            [(each[batch][line][0].texts, each[batch][line][1].summary) for line in common]
        )
        for batch in batches
    }
    for batch in batches:
        found.summaries[batch] = means(scores[batch])
    for batch in batches[1:]:
        found.differences[batch] = {
            kind: paired_bootstrap(
                [b[kind] - a[kind] for a, b in zip(scores[batches[0]], scores[batch], strict=True)]
            )
            for kind in ROUGE_TYPES
        }
    return found


def paired_bootstrap(differences: list[float]) -> Difference:
    """The mean of per-document differences and its bootstrap interval."""
    import numpy as np

    values = np.asarray(differences, dtype=float)
    draws = np.random.default_rng(SEED).integers(0, len(values), (RESAMPLES, len(values)))
    means = values[draws].mean(axis=1)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Difference(float(values.mean()), float(low), float(high))


def report(found: Comparison) -> str:
    """The batches' scores, the lead's, and each difference with its interval, for a terminal."""
    width = max(11, *(len(b) + 2 for b in found.batches))
    lines = [
        f"{found.documents:,} documents summarized by every batch, scored against the references",
        "",
        f"{'':<{width}}{'ROUGE-1':>9}{'ROUGE-2':>9}{'ROUGE-L':>9}",
    ]
    rows = [*((batch, found.summaries[batch]) for batch in found.batches)]
    rows.append((f"lead {found.lead_words}w", found.lead))
    for label, scores in rows:
        lines.append(f"{label:<{width}}" + "".join(f"{scores[k]:>9.3f}" for k in ROUGE_TYPES))
    names = {"rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeL": "ROUGE-L"}
    for batch, by_kind in found.differences.items():
        lines += [
            "",
            f"{batch} - {found.batches[0]} (paired bootstrap, {RESAMPLES:,} resamples, "
            f"{CONFIDENCE:.0%} interval):",
        ]
        for kind, d in by_kind.items():
            lines.append(
                f"  {names[kind]}  {d.mean:+.3f}  [{d.low:+.3f}, {d.high:+.3f}]  {d.verdict}"
            )
    return "\n".join(lines)
