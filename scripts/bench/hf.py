"""hf: transformers `generate` in static batches, at the best of a few batch sizes."""

from __future__ import annotations

import sys
import time

from scripts.bench.common import (
    documents,
)


def run(args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.model import resolve
    from core.settings import Settings
    from worker.engine import chat_prompt_ids, engine_dtype

    settings = Settings.from_env()
    model_path = resolve(settings)
    # The dtypes the worker would run in (SUMMARIZE_DTYPE; "auto": bfloat16 and float32 both
    # tried, float32 alone on a CPU that emulates bfloat16, as worker/engine.py decides).
    runs_in = engine_dtype(settings.dtype, cpu=not torch.cuda.is_available())
    dtypes = (torch.bfloat16, torch.float32) if runs_in == "auto" else (getattr(torch, runs_in),)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    def prompt(text: str) -> list[int]:
        return chat_prompt_ids(tokenizer, settings.instruction, text)

    def generate(model, prompts: list[list[int]], batch: int) -> int:
        produced = 0
        for start in range(0, len(prompts), batch):
            chunk = prompts[start : start + batch]
            padded = tokenizer.pad({"input_ids": chunk}, return_tensors="pt")
            with torch.inference_mode():
                out = model.generate(
                    **padded,
                    max_new_tokens=args.max_tokens,
                    do_sample=False,
                    pad_token_id=tokenizer.pad_token_id,
                )
            for row in out[:, padded["input_ids"].shape[1] :]:
                tokens = row.tolist()
                eos = [i for i, t in enumerate(tokens) if t == tokenizer.eos_token_id]
                produced += (eos[0] + 1) if eos else len(tokens)
        return produced

    prompts = [prompt(d) for d in documents(args.corpus, args.hf_docs or args.docs)]
    trial = [prompt(d) for d in documents(args.corpus, 32)]
    best = None
    for dtype in dtypes:
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).eval()
        generate(model, trial[:4], 4)  # warm-up
        for batch in args.hf_batch_sizes:
            started = time.perf_counter()
            generate(model, trial, batch)
            rate = len(trial) / (time.perf_counter() - started)
            print(
                f"hf trial: {dtype} batch {batch}: {rate:.2f} docs/s", file=sys.stderr, flush=True
            )
            if best is None or rate > best[0]:
                best = (rate, dtype, batch)
        del model
    _, dtype, batch = best
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).eval()
    generate(model, trial[:4], 4)
    started = time.perf_counter()
    tokens = generate(model, prompts, batch)
    seconds = time.perf_counter() - started
    return {
        "mode": "hf",
        "docs": len(prompts),
        "seconds": seconds,
        "output_tokens": tokens,
        "note": f"batch {batch}, {str(dtype).replace('torch.', '')}",
    }
