"""quality: the default model on aclsum papers against their human summaries, by hand and
through the pipeline, scored by `summarize eval`."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from scripts.bench.common import (
    SUMMARIZE,
    running_worker,
)
from scripts.bench.runner import child


def papers() -> list[dict]:
    """aclsum's train and validation papers: {name, text, reference}."""
    import aclsum

    folder = Path(aclsum.__file__).parent / "dataset"
    found = []
    for split in ("train", "val"):
        for line in (folder / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
            paper = json.loads(line)
            sections = paper["sentences"]
            text = "\n\n".join(
                _detokenized(" ".join(sections[s]))
                for s in ("abstract", "introduction", "conclusion")
            )
            summary = paper["summary"]
            reference = " ".join(summary[k] for k in ("challenge", "approach", "outcome"))
            found.append({"name": f"{paper['id']}.txt", "text": text, "reference": reference})
    return found


def _detokenized(text: str) -> str:
    """aclsum's sentences are tokenized ("answers ( QA ) ."): the spaces taken out again."""
    for spaced, plain in (
        (" .", "."),
        (" ,", ","),
        (" ;", ";"),
        (" :", ":"),
        ("( ", "("),
        (" )", ")"),
        (" %", "%"),
        (" 's", "'s"),
        (" n't", "n't"),
        (" ?", "?"),
    ):
        text = text.replace(spaced, plain)
    return text


def run_quality_raw(args) -> dict:
    """vLLM by hand on the papers: greedy alone; with the looping ones generated again; and
    with the sentence limit too (what the pipeline does)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from core.model import resolve
    from core.prompt import SummarySpec
    from core.quality import loops
    from core.settings import Settings
    from worker.engine import VllmEngine

    settings = Settings.from_env()
    engine = VllmEngine(
        resolve(settings), settings.profile, settings.model_name, dtype=settings.dtype
    )
    limit = engine.max_model_len - args.max_tokens  # the papers that fit one request
    found, prompts = [], []
    for paper in papers():
        prompt = engine.prompt_ids(settings.instruction, paper["text"])
        if len(prompt) <= limit:
            found.append(paper)
            prompts.append(TokensPrompt(prompt_token_ids=prompt))

    def decoded(sentences: int | None, again: bool) -> list[tuple[str, str]]:
        """Each paper's summary and finish reason: greedy, then (again) loops generated again."""
        spec = SummarySpec(settings.instruction, args.max_tokens, sentences)
        first = engine.llm.generate(prompts, SamplingParams(**spec.sampling()), use_tqdm=False)
        answers = [(o.outputs[0].text, o.outputs[0].finish_reason) for o in first]
        looping = [i for i, (text, _) in enumerate(answers) if again and loops(text)]
        if looping:
            second = engine.llm.generate(
                [prompts[i] for i in looping],
                SamplingParams(**spec.sampling(loop_breaking=True)),
                use_tqdm=False,
            )
            for i, o in zip(looping, second, strict=True):
                answers[i] = (o.outputs[0].text, o.outputs[0].finish_reason)
        return answers

    stages = {
        "greedy": decoded(None, again=False),
        "again": decoded(None, again=True),
        "limited": decoded(settings.sentences_for(settings.instruction), again=True),
    }
    engine.close()
    return {"mode": "quality-raw", "names": [p["name"] for p in found], **stages}


def run(args) -> dict:
    from core.quality import loops, novel_numbers
    from readers.evaluation import score

    by_name = {p["name"]: p for p in papers()}
    raw = child("quality-raw", args)
    names = raw["names"]
    measured = {}
    for stage in ("greedy", "again", "limited"):
        outputs = raw[stage]
        items = [
            ((by_name[n]["reference"],), text, by_name[n]["text"])
            for n, (text, _) in zip(names, outputs, strict=True)
        ]
        summaries, lead, lead_words = score(items)
        measured[stage] = {
            "summaries": summaries,
            "lead": lead,
            "lead_words": lead_words,
            "looped": sum(loops(text) for text, _ in outputs) / len(outputs),
            "truncated": sum(reason == "length" for _, reason in outputs) / len(outputs),
            "novel": sum(
                bool(novel_numbers(text, by_name[n]["text"]))
                for n, (text, _) in zip(names, outputs, strict=True)
            )
            / len(outputs),
        }
    measured["pipeline"] = _quality_pipeline(args, [by_name[n] for n in names])
    return {"mode": "quality", "docs": len(names), "papers": len(by_name), **measured}


def _quality_pipeline(args, chosen: list[dict]) -> dict:
    """The papers through `submit --wait` and a running worker, scored by `summarize eval`."""
    import sqlalchemy as sa

    from core import database
    from core.settings import Settings
    from core.tables import results

    work = Path(tempfile.mkdtemp(prefix="summarize-quality-"))
    env = os.environ | {
        "SUMMARIZE_DATA_DIR": str(work / "data"),
        "SUMMARIZE_QUEUE": f"bench-{os.getpid()}",
        "SUMMARIZE_MODEL": os.environ.get(
            "SUMMARIZE_MODEL", str(Settings.from_env().default_model_dir)
        ),
    }
    corpus = work / "corpus"
    corpus.mkdir()
    references = work / "references.jsonl"
    with references.open("w", encoding="utf-8") as out:
        for paper in chosen:
            (corpus / paper["name"]).write_text(paper["text"], encoding="utf-8")
            out.write(
                json.dumps({"source_path": paper["name"], "reference": paper["reference"]}) + "\n"
            )
    with running_worker(env, work):
        subprocess.run(
            [*SUMMARIZE, "submit", str(corpus), "--batch", "aclsum", "--wait", "--timeout", "7200"],
            env=env,
            check=True,
            capture_output=True,
        )
        done = subprocess.run(
            [*SUMMARIZE, "eval", "aclsum", "--references", str(references), "--json"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        found = json.loads(done.stdout)
        db = database.connect(Settings.from_env(env))
        with db.connect() as conn:
            rows = conn.execute(
                sa.select(
                    results.c.novel_numbers,
                    results.c.finish_reason,
                    results.c.looped,
                    results.c.parts,
                    results.c.flaw,
                ).where(results.c.batch == "aclsum")
            ).all()
        db.dispose()
        found["novel"] = sum(r.novel_numbers > 0 for r in rows) / len(rows)
        found["stopped"] = sum(r.finish_reason == "stop" for r in rows)
        found["still_looped"] = sum(bool(r.looped) for r in rows)
        found["parts"] = sum(r.parts for r in rows) / len(rows)
        found["flaws"] = dict(Counter(r.flaw for r in rows if r.flaw))
        return found


def report(result: dict) -> None:
    print(
        f"quality   {result['docs']} of {result['papers']} aclsum papers (those that fit one prompt)"
    )
    print(
        f"  {'':<22}{'ROUGE-1':>8}{'ROUGE-2':>8}{'ROUGE-L':>8}{'looped':>8}{'cut':>6}{'novel#':>8}"
    )
    for stage, label in (
        ("greedy", "greedy alone (raw)"),
        ("again", "+ loops again (raw)"),
        ("limited", "+ sentence limit (raw)"),
        ("pipeline", "pipeline + eval"),
    ):
        r = result[stage]
        looped = r.get("looped", r.get("signals", {}).get("looped"))
        cut = r.get("truncated", r.get("signals", {}).get("truncated"))
        print(
            f"  {label:<22}"
            + "".join(f"{r['summaries'][k]:>8.3f}" for k in ("rouge1", "rouge2", "rougeL"))
            + f"{looped:>8.0%}{cut:>6.0%}{r['novel']:>8.0%}"
        )
        print(
            f"  {'  lead ' + str(r['lead_words']) + ' words':<22}"
            + "".join(f"{r['lead'][k]:>8.3f}" for k in ("rouge1", "rouge2", "rougeL"))
        )
