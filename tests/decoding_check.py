"""Run by tests/test_engine.py in a process of its own (vLLM starts its engine core there):
the real engine decodes the same documents greedily several ways, and prints each way's
tokens as JSON.

- `plain`, `vllm` (vLLM's own frequency_penalty) and `ours` (the one worker/rules.py applies:
  core.prompt.SummarySpec.sampling's loop-breaking settings, no_repeat_ngram left out), on
  the `short` documents at 64 tokens;
- `long` and `watched` (a first try that ends once it loops, worker/loops.py), on the
  `whole` documents at 128 tokens, and `watched_text`.
"""

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
    given = json.loads(sys.stdin.read())

    def prompts(texts: list[str]) -> list[TokensPrompt]:
        return [
            TokensPrompt(prompt_token_ids=engine.prompt_ids(settings.instruction, text))
            for text in texts
        ]

    short = SummarySpec(settings.instruction, 64)
    ours = short.sampling(loop_breaking=True)
    del ours["extra_args"]["no_repeat_ngram"]
    long = SummarySpec(settings.instruction, 128)
    ways = {
        "plain": (given["short"], SamplingParams(**short.sampling())),
        "vllm": (given["short"], SamplingParams(**short.sampling(), frequency_penalty=1.0)),
        "ours": (given["short"], SamplingParams(**ours)),
        "long": (given["whole"], SamplingParams(**long.sampling())),
        "watched": (given["whole"], SamplingParams(**long.sampling(watch_loops=True))),
    }
    found = {}
    for name, (texts, params) in ways.items():
        # Each way from a cold cache: KV reused from an earlier way is computed apart, and
        # its last bits can turn a near tie the other way.
        engine.llm.reset_prefix_cache()
        outputs = engine.llm.generate(prompts(texts), params, use_tqdm=False)
        found[name] = [list(o.outputs[0].token_ids) for o in outputs]
        if name == "watched":
            found["watched_text"] = [o.outputs[0].text for o in outputs]
    # Two documents one after the other: the second's prompt starts as the first's did.
    engine.llm.reset_prefix_cache()
    for text in given["short"][:2]:
        (output,) = engine.llm.generate(
            prompts([text]), SamplingParams(max_tokens=1), use_tqdm=False
        )
    found["cached"] = output.num_cached_tokens
    # Thirteen requests wait for the engine's ten places (SUMMARIZE_MAX_NUM_SEQS), a
    # follow-up added last; each writes one token, so the first step finishes those it took.
    one = SummarySpec(settings.instruction, 1)
    ids = engine.prompt_ids(settings.instruction, given["short"][0])
    for n in range(12):
        engine.add(f"new-{n}", ids, one)
    engine.add("follow-up", ids, one, follow_up=True)
    found["first_step"] = [f.request_id for f in engine.step()]
    while engine.unfinished():
        engine.step()
    engine.close()
    print(json.dumps(found))
