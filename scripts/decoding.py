#!/usr/bin/env python
"""Which decoding ends summaries well: the comparison behind docs/performance.md's decoding table.

    python scripts/decoding.py                   # every variant
    python scripts/decoding.py greedy sentences  # just these

On the aclsum papers (train and validation) that fit one prompt and the distinct
lee-background articles, with the default model, profile and instruction, 128-token cap
unless a variant says otherwise, vLLM by hand: each variant's summaries, the looping ones
generated again with the loop-breaking settings. Prints one JSON line per variant and
corpus: the share that ends by `stop`, loops on the first try, still loops, gives a
number the document lacks, the mean words, and on the papers ROUGE against their human
summaries (readers/evaluation.score) beside the lead baseline.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

AGAIN = "\n\nSummarize the document above in two or three sentences."
VARIANTS = {  # name: (text after the document, SamplingParams changes)
    "greedy": (None, {}),
    "blank-line": (None, {"stop": ["\n\n"]}),
    "blank-line-192": (None, {"stop": ["\n\n"], "max_tokens": 192}),
    "blank-line-256": (None, {"stop": ["\n\n"], "max_tokens": 256}),
    "instruction-after": (AGAIN, {}),
    "sentences": (None, {"extra_args": {"max_sentences": 3}}),
    "sentences-blank-line": (None, {"extra_args": {"max_sentences": 3}, "stop": ["\n\n"]}),
}


def main() -> None:
    from bench.common import DEFAULT_CORPUS, documents
    from bench.quality import papers
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from core.model import resolve
    from core.prompt import LOOP_BREAKING, TEMPERATURE
    from core.quality import loops, novel_numbers
    from core.settings import Settings
    from readers.evaluation import score
    from worker.engine import VllmEngine, plain_ids

    settings = Settings.from_env()
    engine = VllmEngine(resolve(settings), settings.profile, settings.model_name)
    instruction = settings.instruction
    fitting = [
        p
        for p in papers()
        if len(engine.prompt_ids(instruction, p["text"])) <= engine.max_model_len - 128
    ]
    corpora = {"papers": [p["text"] for p in fitting], "news": documents(DEFAULT_CORPUS, None)}
    turn_end = engine.tokenizer.encode(
        "<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )

    def prompt(text: str, after: str | None) -> TokensPrompt:
        ids = engine.prompt_ids(instruction, text)
        if after:  # at the end of the user's turn, after the document
            assert ids[-len(turn_end) :] == turn_end
            ids = ids[: -len(turn_end)] + plain_ids(engine.tokenizer, after) + turn_end
        return TokensPrompt(prompt_token_ids=ids)

    for name in sys.argv[1:] or list(VARIANTS):
        after, changes = VARIANTS[name]
        changes = dict(changes)
        cap = changes.pop("max_tokens", 128)
        for corpus, texts in corpora.items():
            started = time.time()
            prompts = [prompt(t, after) for t in texts]
            base = {"max_tokens": cap, "temperature": TEMPERATURE, **changes}
            outputs = engine.llm.generate(prompts, SamplingParams(**base), use_tqdm=False)
            found = [(o.outputs[0].text, o.outputs[0].finish_reason) for o in outputs]
            first = [i for i, (text, _) in enumerate(found) if loops(text)]
            if first:
                again = engine.llm.generate(
                    [prompts[i] for i in first],
                    SamplingParams(**base, **LOOP_BREAKING),
                    use_tqdm=False,
                )
                for i, o in zip(first, again, strict=True):
                    found[i] = (o.outputs[0].text, o.outputs[0].finish_reason)
            n = len(texts)
            row = {
                "variant": name,
                "corpus": corpus,
                "documents": n,
                "stop": sum(reason == "stop" for _, reason in found) / n,
                "looped_first": len(first) / n,
                "looped": sum(loops(text) for text, _ in found) / n,
                "novel_numbers": sum(
                    bool(novel_numbers(s, t)) for (s, _), t in zip(found, texts, strict=True)
                )
                / n,
                "words": sum(len(text.split()) for text, _ in found) / n,
                "seconds": round(time.time() - started),
            }
            if corpus == "papers":
                summaries, lead, _ = score(
                    [
                        ((p["reference"],), s, p["text"])
                        for p, (s, _) in zip(fitting, found, strict=True)
                    ]
                )
                row |= {"summaries": summaries, "lead": lead}
            print(json.dumps(row), flush=True)
    engine.close()


if __name__ == "__main__":  # vLLM's engine starts processes that import this file again
    main()
