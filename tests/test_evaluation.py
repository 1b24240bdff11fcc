"""`summarize eval`: a batch's summaries against references people wrote, beside a lead baseline.

Batches are submitted for real and summarized by the real drain loop with the stand-in
engine, whose summary of a document is `summary of N tokens`; ROUGE is the real
rouge-score package.
"""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from core.tables import results
from readers.evaluation import TEXT_GONE, lead, read_references
from tests.batches import summarize_queued
from tests.helpers import run, write

ALPHA = "Alpha went up. Beta went down sharply today. Gamma stayed where it was."


def summarized(env, settings, db, folder, batch="night") -> dict[str, str]:
    """Submit the folder and summarize it; returns {file name: summary or None}."""
    assert run(env, "submit", str(folder), "--batch", batch).exit_code in (0, 3)
    summarize_queued(settings.with_changes(max_attempts=1), db, batch)
    with db.connect() as conn:
        rows = conn.execute(
            sa.select(results.c.source_path, results.c.summary).where(results.c.batch == batch)
        ).all()
    return {path.rsplit("/", 1)[-1]: summary for path, summary in rows}


def lines(*records) -> str:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n"


def evaluate(env, tmp_path, batch: str, *records) -> tuple[dict, list[str]]:
    """`summarize eval BATCH --references FILE --json`: its object and its lines on stderr."""
    references = tmp_path / "references.jsonl"
    references.write_text(lines(*records), encoding="utf-8")
    result = run(env, "eval", batch, "--references", str(references), "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr.splitlines()


def test_a_summary_equal_to_its_reference_scores_one_beside_the_lead_of_its_length(
    env, settings, db, tmp_path
):
    write(tmp_path / "in", "alpha.txt", ALPHA)
    summary = summarized(env, settings, db, tmp_path / "in")["alpha.txt"]

    found, problems = evaluate(
        env, tmp_path, "night", {"source_path": "alpha.txt", "reference": summary}
    )

    assert problems == []
    assert found["documents"] == 1
    assert found["summaries"] == {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0}
    assert found["lead_words"] == len(summary.split())  # `summary of N tokens`: 4 words
    assert found["lead"]["rouge1"] == 0.0  # "alpha went up beta went down…" shares no word
    assert found["signals"]["looped"] == 0
    assert found["signals"]["compression"] > 0


def test_several_references_score_against_the_closest(env, settings, db, tmp_path):
    write(tmp_path / "in", "alpha.txt", ALPHA)
    summary = summarized(env, settings, db, tmp_path / "in")["alpha.txt"]

    found, _ = evaluate(
        env,
        tmp_path,
        "night",
        {
            "source_path": "alpha.txt",
            "references": ["Alpha went up. Beta went down sharply today.", summary],
        },
    )

    assert found["summaries"]["rougeL"] == 1.0  # against the second
    assert found["lead"]["rougeL"] == 1.0  # against the first


def test_the_lead_is_the_first_sentences_that_reach_the_length():
    assert lead(ALPHA, 1) == "alpha went up"
    assert lead(ALPHA, 4) == "alpha went up beta went down sharply today"
    assert (
        lead(ALPHA, 100) == "alpha went up beta went down sharply today gamma stayed where it was"
    )


def test_lines_name_documents_by_path_or_by_a_file_name_the_batch_holds_once(
    env, settings, db, tmp_path
):
    folder = tmp_path / "in"
    write(folder, "alpha.txt", ALPHA)
    write(folder, "north/same.txt", "The north office opened. It has ten desks.")
    write(folder, "south/same.txt", "The south office closed. It had two desks.")
    write(folder, "poison.txt", "poison pill")  # the stand-in engine refuses it: failed
    summarized(env, settings, db, folder)

    found, problems = evaluate(
        env,
        tmp_path,
        "night",
        {"source_path": "alpha.txt", "reference": "Alpha went up."},
        {"source_path": str(folder / "north/same.txt"), "reference": "North opened."},
        {"source_path": "same.txt", "reference": "Which one?"},
        {"source_path": "poison.txt", "reference": "Never summarized."},
        {"source_path": "missing.txt", "reference": "Not in the batch."},
        {"source_path": str(folder / "alpha.txt"), "reference": "Named twice."},
        "not json",
        {"source_path": "alpha.txt"},
        ["a list"],
    )

    assert found["documents"] == 2  # alpha.txt and north/same.txt
    assert problems == [
        f"{tmp_path / 'references.jsonl'}: {line}"
        for line in (
            "line 3: 2 documents of night are named same.txt: give the path as submitted",
            "line 4: poison.txt has no summary (failed: ValueError: the engine refused this "
            "prompt (after 1 attempt))",
            "line 5: no document missing.txt in night",
            f"line 6: {folder / 'alpha.txt'} was named by line 1 already",
            "line 7: not JSON (Expecting value: line 1 column 1 (char 0))",
            'line 8: no "reference" text (or "references": a list of texts)',
            'line 9: not a JSON object: write {"source_path": ..., "reference": ...}',
        )
    ]
    assert [p["line"] for p in found["problems"]] == [3, 4, 5, 6, 7, 8, 9]


def test_a_text_the_database_dropped_is_read_again_from_its_file_unless_the_file_changed(
    env, settings, db, tmp_path
):
    path = write(tmp_path / "in", "alpha.txt", ALPHA)
    write(tmp_path / "in", "beta.txt", "Beta went down. It did so sharply.")
    summarized(env, settings, db, tmp_path / "in")
    path.write_text("Alpha was rewritten after the batch.", encoding="utf-8")

    found, problems = evaluate(
        env,
        tmp_path,
        "night",
        {"source_path": "alpha.txt", "reference": "Alpha went up."},
        {"source_path": "beta.txt", "reference": "Beta went down. It did so sharply."},
    )

    assert found["documents"] == 1
    assert problems == [f"{tmp_path / 'references.jsonl'}: line 1: {path}: {TEXT_GONE}"]
    assert found["lead"]["rouge1"] == pytest.approx(1.0)  # beta.txt, read from its file


def test_references_that_match_nothing_are_an_error_that_says_how_to_name_documents(
    env, settings, db, tmp_path
):
    write(tmp_path / "in", "alpha.txt", ALPHA)
    summarized(env, settings, db, tmp_path / "in")
    references = tmp_path / "references.jsonl"
    references.write_text(lines({"source_path": "other.txt", "reference": "x"}), encoding="utf-8")

    result = run(env, "eval", "night", "--references", str(references))

    assert result.exit_code == 1
    assert "line 1: no document other.txt in night" in result.stderr
    assert "name each by its path as submitted" in result.output


def test_the_table_shows_both_rows_of_scores_and_the_signals(env, settings, db, tmp_path):
    write(tmp_path / "in", "alpha.txt", ALPHA)
    summary = summarized(env, settings, db, tmp_path / "in")["alpha.txt"]
    references = tmp_path / "references.jsonl"
    references.write_text(lines({"source_path": "alpha.txt", "reference": summary}))

    result = run(env, "eval", "night", "--references", str(references))

    assert result.exit_code == 0
    table = result.stdout.splitlines()
    assert table[0] == "night: 1 documents scored"
    assert table[3].split() == ["summaries", "1.000", "1.000", "1.000"]
    assert table[4].split()[:2] == ["lead", "4w"]
    assert table[-1].startswith("signals (means): repetition 0.000, copied ")


def test_reference_lines_are_read_one_by_one():
    found, problems = read_references(
        [
            '{"source_path": "a.txt", "reference": "A."}',
            "",
            '{"source_path": " ", "reference": "B."}',
        ]
    )

    assert [(r.line, r.name, r.texts) for r in found] == [(1, "a.txt", ("A.",))]
    assert [str(p) for p in problems] == [
        'line 3: no "source_path": name the document as submitted, or its file'
    ]


def _set_summaries(db, batch: str, summaries: dict[str, str]) -> None:
    """Give the batch's rows these summaries, by file name (as another model would have)."""
    with db.begin() as conn:
        for name, summary in summaries.items():
            conn.execute(
                results.update()
                .where(results.c.batch == batch, results.c.source_path.like(f"%/{name}"))
                .values(summary=summary)
            )


def compare(env, tmp_path, batches: list[str], *records, json_out=True):
    references = tmp_path / "references.jsonl"
    references.write_text(lines(*records), encoding="utf-8")
    result = run(
        env, "eval", *batches, "--references", str(references), *(["--json"] if json_out else [])
    )
    assert result.exit_code == 0, result.output
    return (json.loads(result.stdout) if json_out else result.stdout), result.stderr.splitlines()


def test_batches_are_compared_on_the_same_documents_with_a_paired_interval(
    env, settings, db, tmp_path
):
    facts = [
        f"Town {i} opened a new bridge on Monday. Traffic fell by {i} percent." for i in range(12)
    ]
    for i, fact in enumerate(facts):
        write(tmp_path / "in", f"doc{i:02d}.txt", fact + " The mayor spoke. Rain fell later.")
    summarized(env, settings, db, tmp_path / "in", batch="small-model")
    summarized(env, settings, db, tmp_path / "in", batch="big-model")
    _set_summaries(db, "small-model", {f"doc{i:02d}.txt": "The mayor spoke." for i in range(12)})
    _set_summaries(db, "big-model", {f"doc{i:02d}.txt": facts[i] for i in range(12)})
    refs = [{"source_path": f"doc{i:02d}.txt", "reference": facts[i]} for i in range(12)]

    found, problems = compare(env, tmp_path, ["small-model", "big-model"], *refs)

    assert problems == []
    assert found["documents"] == 12 and found["against"] == "small-model"
    assert found["summaries"]["big-model"] == {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0}
    better = found["differences"]["big-model"]["rouge1"]
    assert better["verdict"] == "better" and 0 < better["low"] <= better["mean"] <= better["high"]
    assert found["lead"]["rouge1"] > found["summaries"]["small-model"]["rouge1"]


def test_equal_batches_are_not_clearly_different_and_documents_one_lacks_are_left_out(
    env, settings, db, tmp_path
):
    write(tmp_path / "in", "alpha.txt", ALPHA)
    write(tmp_path / "in", "beta.txt", "Beta rose again. Nobody knew why.")
    env, settings = env | {"SUMMARIZE_KEEP_TEXTS": "1"}, settings.with_changes(keep_texts=True)
    summarized(env, settings, db, tmp_path / "in", batch="first")
    (tmp_path / "in" / "beta.txt").unlink()
    summarized(env, settings, db, tmp_path / "in", batch="second")
    refs = [{"source_path": "alpha.txt", "reference": "Alpha went up."},
            {"source_path": "beta.txt", "reference": "Beta rose."}]  # fmt: skip

    found, problems = compare(env, tmp_path, ["first", "second"], *refs)
    shown, _ = compare(env, tmp_path, ["first", "second"], *refs, json_out=False)

    assert found["documents"] == 1
    assert found["differences"]["second"]["rougeL"] == {
        "mean": 0.0, "low": 0.0, "high": 0.0, "verdict": "not clearly different"
    }  # fmt: skip
    assert problems[-1].endswith("(second): line 2: no document beta.txt in second")
    assert any(
        "(first): line 2: beta.txt: not summarized by every batch compared" in p for p in problems
    )
    assert "second - first (paired bootstrap, 1,000 resamples, 95% interval):" in shown
    assert "  ROUGE-L  +0.000  [+0.000, +0.000]  not clearly different" in shown


def test_a_batch_named_twice_is_refused(env, settings, db, tmp_path):
    write(tmp_path / "in", "alpha.txt", ALPHA)
    summarized(env, settings, db, tmp_path / "in")
    (tmp_path / "refs.jsonl").write_text(lines({"source_path": "alpha.txt", "reference": "A."}))

    result = run(env, "eval", "night", "night", "--references", str(tmp_path / "refs.jsonl"))

    assert result.exit_code == 2
    assert "A batch is named twice" in result.output
