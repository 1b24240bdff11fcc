"""raw: one LLM.generate call over every document at once (the ceiling), then one over the
summaries that loop, with the settings that break loops."""

from __future__ import annotations

import time

from scripts.bench.common import (
    SAMPLES,
    documents,
)


def run(args) -> dict:
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
    limit = engine.max_model_len - args.max_tokens
    prompts = [
        engine.prompt_ids(settings.instruction, d) for d in documents(args.corpus, args.docs)
    ]
    if any(len(p) > limit for p in prompts):
        raise SystemExit(
            "raw mode needs documents that fit the context: raise SUMMARIZE_MAX_MODEL_LEN"
        )
    spec = SummarySpec(
        settings.instruction, args.max_tokens, settings.sentences_for(settings.instruction)
    )
    params = SamplingParams(**spec.sampling())
    warm = [engine.prompt_ids(settings.instruction, d) for d in documents(SAMPLES, None)]
    engine.llm.generate([TokensPrompt(prompt_token_ids=p) for p in warm], params, use_tqdm=False)
    started = time.perf_counter()
    outputs = engine.llm.generate(
        [TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False
    )
    # The same summaries as the pipeline's: those that loop, generated again (worker/parts.py)
    looped = [p for p, o in zip(prompts, outputs, strict=True) if loops(o.outputs[0].text)]
    again = []
    if looped:
        again = engine.llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in looped],
            SamplingParams(**spec.sampling(loop_breaking=True)),
            use_tqdm=False,
        )
    seconds = time.perf_counter() - started
    engine.close()
    tokens = sum(len(o.outputs[0].token_ids) for o in [*outputs, *again])
    return {
        "mode": "raw",
        "docs": len(outputs),
        "seconds": seconds,
        "output_tokens": tokens,
        "again": len(again),
    }
