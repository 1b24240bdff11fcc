"""Run by tests/test_engine.py in a process of its own (vLLM starts its engine core there):
the real engine summarizes the same documents greedily three ways, and prints each one's
tokens as JSON: plain, with vLLM's own frequency_penalty, and with the one worker/rules.py
applies (core.prompt.SummarySpec.sampling's loop-breaking settings, with no_repeat_ngram left out)."""

from __future__ import annotations

import json
import sys

if __name__ == "__main__":
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from core.model import resolve
    from core.prompt import SummarySpec
    from core.settings import Settings
    from worker.engine import VllmEngine

    settings = Settings.from_env()
    engine = VllmEngine(
        resolve(settings), settings.profile, settings.model_name, dtype=settings.dtype
    )
    prompts = [
        TokensPrompt(prompt_token_ids=engine.prompt_ids(settings.instruction, text))
        for text in json.loads(sys.stdin.read())
    ]
    spec = SummarySpec(settings.instruction, 64)
    ours = spec.sampling(loop_breaking=True)
    del ours["extra_args"]["no_repeat_ngram"]
    ways = {
        "plain": SamplingParams(**spec.sampling()),
        "vllm": SamplingParams(**spec.sampling(), frequency_penalty=1.0),
        "ours": SamplingParams(**ours),
    }
    found = {}
    for name, params in ways.items():
        # Each way from a cold cache: KV reused from an earlier way is computed apart, and
        # its last bits can turn a near tie the other way.
        engine.llm.reset_prefix_cache()
        outputs = engine.llm.generate(prompts, params, use_tqdm=False)
        found[name] = [list(o.outputs[0].token_ids) for o in outputs]
    engine.close()
    print(json.dumps(found))
