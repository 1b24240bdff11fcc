#!/usr/bin/env python
"""A summary that repeats itself: its repeats dropped, or a second try? The comparison behind
docs/performance.md's "A repeat dropped rather than generated again".

    python scripts/mending.py

On the aclsum papers (train and validation) that fit one prompt and the distinct
lee-background articles, with the default model, profile and instruction, 128-token cap,
through the worker's engine: every document's first try (watched for loops, as a final
summary's is) and its second try with the loop-breaking settings, with the default sentence
limit and without one. Then two ways to use them: `again` generates a second try for every
first try that loops or has a flaw the second try mends (what the worker did before), `drop`
keeps the first try without its repeats when that leaves a usable summary (worker/parts.py
now). Prints, per way: the tokens spent, the second tries made, the summaries still flawed,
the mean words, and on the papers ROUGE against their human summaries beside the lead, with
the paired bootstrap interval of `drop - again` (readers/comparison.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def main() -> None:
    from bench.common import DEFAULT_CORPUS, documents
    from bench.quality import papers

    from core.model import resolve
    from core.prompt import SummarySpec
    from core.quality import flaw, loops, usable, without_repeats
    from core.settings import DEFAULT_SENTENCES, Settings
    from readers.comparison import paired_bootstrap
    from readers.evaluation import each_score, score
    from worker.engine import VllmEngine
    from worker.parts import BREAKING

    settings = Settings.from_env()
    engine = VllmEngine(resolve(settings), settings.profile, settings.model_name)
    instruction = settings.instruction
    docs = [
        p | {"ids": ids}
        for p in papers()
        if len(ids := engine.prompt_ids(instruction, p["text"])) <= engine.max_model_len - 128
    ]
    docs += [
        {"text": t, "reference": None, "ids": engine.prompt_ids(instruction, t)}
        for t in documents(DEFAULT_CORPUS, None)
    ]

    def generate(spec: SummarySpec, **how) -> list:
        for i, doc in enumerate(docs):
            engine.add(str(i), doc["ids"], spec, **how)
        done = {}
        while engine.unfinished():
            done |= {f.request_id: f for f in engine.step()}
        return [done[str(i)] for i in range(len(docs))]

    engine.add("warm-up", docs[0]["ids"], SummarySpec(instruction, 8))
    while engine.unfinished():
        engine.step()
    for sentences in (DEFAULT_SENTENCES, None):
        spec = SummarySpec(instruction, 128, sentences)
        firsts = generate(spec, watch_loops=True)
        seconds = generate(spec, loop_breaking=True)
        ways = {}
        for way in ("again", "drop"):
            texts, tokens, tries = [], 0, 0
            for doc, first, second in zip(docs, firsts, seconds, strict=True):
                tokens += first.completion_tokens
                bad = loops(first.text) or flaw(first.text, doc["text"], instruction) in BREAKING
                if bad and not (
                    way == "drop" and usable(without_repeats(first.text), doc["text"], instruction)
                ):
                    tokens, tries = tokens + second.completion_tokens, tries + 1
                    texts.append(without_repeats(second.text))
                else:
                    texts.append(without_repeats(first.text))
            still = sum(
                not usable(t, d["text"], instruction) for t, d in zip(texts, docs, strict=True)
            )
            words = sum(len(t.split()) for t in texts) / len(texts)
            print(
                f"sentences {sentences}, {way}: {tokens:,} tokens, {tries} second tries, "
                f"{still} still flawed, {words:.0f} words"
            )
            on_papers = [(t, d) for t, d in zip(texts, docs, strict=True) if d["reference"]]
            ways[way] = each_score([((d["reference"],), t) for t, d in on_papers])
            found, lead, lead_words = score(
                [((d["reference"],), t, d["text"]) for t, d in on_papers]
            )
            print(
                f"  {len(on_papers)} papers: ROUGE-1/2/L {found['rouge1']:.3f} "
                f"{found['rouge2']:.3f} {found['rougeL']:.3f}; lead {lead_words} words "
                f"{lead['rouge1']:.3f} {lead['rouge2']:.3f} {lead['rougeL']:.3f}"
            )
        for metric in ("rouge1", "rougeL"):
            pairs = zip(ways["again"], ways["drop"], strict=True)
            d = paired_bootstrap([b[metric] - a[metric] for a, b in pairs])
            print(f"  drop - again, {metric}: {d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}]")
    engine.close()


if __name__ == "__main__":
    main()
