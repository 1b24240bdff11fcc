"""The sentence limit as a vLLM logits processor (the rule: worker/sentences.py).

The engine builds one in its own process (`LLM(logits_processors=[...])`, by name:
worker/engine.py); it reads each token's text from the model's tokenizer once, when it
starts. A request with `extra_args={"max_sentences": N}` gets its stop tokens as the only
choice once its output holds N sentences and its last token ends one.
"""

from __future__ import annotations

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from worker.sentences import Count, token_kinds


class SentenceLimit(LogitsProcessor):
    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        from transformers import AutoTokenizer

        config = vllm_config.model_config
        tokenizer = AutoTokenizer.from_pretrained(
            config.tokenizer, trust_remote_code=config.trust_remote_code
        )
        pieces = [tokenizer.decode([i]) for i in range(len(tokenizer))]
        self.ends, self.letters = token_kinds(pieces)
        self.counts: dict[int, Count] = {}

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        limit = (sampling_params.extra_args or {}).get("max_sentences")
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ValueError(f"max_sentences must be a positive whole number, not {limit!r}")

    def is_argmax_invariant(self) -> bool:
        return False  # it changes which token greedy decoding picks

    @staticmethod
    def _added(params, _prompt: list[int] | None, output: list[int]) -> Count | None:
        limit = (params.extra_args or {}).get("max_sentences")
        if not limit:
            return None
        return Count(limit, output, sorted(params.all_stop_token_ids))

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self.counts, batch_update, self._added)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for row, count in self.counts.items():
            if count.stops and count.update(self.ends, self.letters):
                stops = torch.tensor(count.stops, device=logits.device)
                kept = logits[row, stops]
                logits[row] = float("-inf")
                logits[row, stops] = kept
        return logits
