"""The rules a summary is decoded under, as one vLLM logits processor.

- `extra_args={"max_sentences": N}`: once the output holds N sentences and its last token
  ends one, the stop tokens are the only choice (the rule: worker/sentences.py).
- `extra_args={"stop_looping": N}`: once the output's last N words have come three times,
  the stop tokens are the only choice (worker/loops.py); asked of a final summary's first
  try, which is generated again if it loops.
- `extra_args={"no_repeat_ngram": N}`: a token that would repeat a run of N tokens of the
  output is not a choice (worker/repeats.py); asked of a summary generated again because
  it looped.
- `extra_args={"frequency_penalty": P}`: each token's logit less P times how often the
  output holds it, as vLLM's own `frequency_penalty` does, last, as vLLM applies its own
  after logits processors. Here it costs the requests that ask for it: vLLM's counts every
  token of every request in the running batch each step once any request asks (measured in
  docs/performance.md: hundreds of milliseconds a step at 256 requests).

The engine builds one in its own process (`LLM(logits_processors=[...])`, by name:
worker/engine.py); it reads each token's text from the model's tokenizer once, when it
starts.
"""

from __future__ import annotations

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from worker.loops import LoopWatch, word_starts
from worker.repeats import Repeats
from worker.sentences import Count, token_kinds


class SummaryRules(LogitsProcessor):
    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        from transformers import AutoTokenizer

        config = vllm_config.model_config
        tokenizer = AutoTokenizer.from_pretrained(
            config.tokenizer, trust_remote_code=config.trust_remote_code
        )
        pieces = [tokenizer.decode([i]) for i in range(len(tokenizer))]
        self.ends, self.letters = token_kinds(pieces)
        self.starts = word_starts(pieces)
        self.counts: dict[int, Count] = {}
        self.watches: dict[int, LoopWatch] = {}
        self.repeats: dict[int, Repeats] = {}
        self.penalties: dict[int, tuple[float, list[int]]] = {}  # row -> (penalty, output)

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        for name in ("max_sentences", "no_repeat_ngram", "stop_looping"):
            value = (sampling_params.extra_args or {}).get(name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive whole number, not {value!r}")
        penalty = (sampling_params.extra_args or {}).get("frequency_penalty")
        if penalty is not None and (
            isinstance(penalty, bool)
            or not isinstance(penalty, int | float)
            or not 0 < penalty <= 2
        ):
            raise ValueError(f"frequency_penalty must be above 0 and at most 2, not {penalty!r}")

    def is_argmax_invariant(self) -> bool:
        return False  # it changes which token greedy decoding picks

    @staticmethod
    def _added(params, _prompt: list[int] | None, output: list[int]) -> Count | None:
        limit = (params.extra_args or {}).get("max_sentences")
        if not limit:
            return None
        return Count(limit, output, sorted(params.all_stop_token_ids))

    @staticmethod
    def _watch(params, _prompt: list[int] | None, output: list[int]) -> LoopWatch | None:
        n = (params.extra_args or {}).get("stop_looping")
        return LoopWatch(n, output, sorted(params.all_stop_token_ids)) if n else None

    @staticmethod
    def _repeats(params, _prompt: list[int] | None, output: list[int]) -> Repeats | None:
        n = (params.extra_args or {}).get("no_repeat_ngram")
        return Repeats(n, output) if n else None

    @staticmethod
    def _penalty(params, _prompt: list[int] | None, output: list[int]):
        penalty = (params.extra_args or {}).get("frequency_penalty")
        return (float(penalty), output) if penalty else None

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self.counts, batch_update, self._added)
        process_dict_updates(self.watches, batch_update, self._watch)
        process_dict_updates(self.repeats, batch_update, self._repeats)
        process_dict_updates(self.penalties, batch_update, self._penalty)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for row, repeats in self.repeats.items():
            banned = repeats.banned()
            if banned:
                logits[row, torch.tensor(sorted(banned), device=logits.device)] = float("-inf")
        for row, count in self.counts.items():
            if count.stops and count.update(self.ends, self.letters):
                _only(logits, row, count.stops)
        for row, watch in self.watches.items():
            if watch.stops and watch.update(self.starts):
                _only(logits, row, watch.stops)
        for row, (penalty, output) in self.penalties.items():
            if output:
                tokens, counts = torch.tensor(output).unique(return_counts=True)
                tokens = tokens.to(logits.device)
                logits[row, tokens] -= penalty * counts.to(logits.device, logits.dtype)
        return logits


def _only(logits: torch.Tensor, row: int, tokens: list[int]) -> None:
    """Leave `tokens` the row's only choices, as likely against each other as they were."""
    chosen = torch.tensor(tokens, device=logits.device)
    kept = logits[row, chosen]
    logits[row] = float("-inf")
    logits[row, chosen] = kept
