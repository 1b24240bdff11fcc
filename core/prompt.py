"""What makes two summaries the same: the document, the model, and the summary's spec (its
instruction, length, sentence limit and schema).

A result is reused only when all of these match; changing any of them (or the way
prompts are laid out, PROMPT_FORMAT) makes new summaries.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property

from core.quality import LOOP_RUN_WORDS

# Bump when the prompt layout or sampling changes, so earlier results are not reused.
PROMPT_FORMAT = 1
TEMPERATURE = 0.0  # greedy: the same document gives the same summary
# A summary that loops (core/quality.py) is generated once more with a frequency penalty:
# each token is made less likely the more often the summary has used it (vLLM's
# frequency_penalty, applied by worker/rules.py to that request alone: vLLM's own makes every
# request of the running batch pay for it each step). Chosen on ACL papers of aclsum's train
# and validation splits, where it broke most loops and raised ROUGE-L; a repetition_penalty
# broke loops too but wrote nonsense (docs/performance.md has the figures).
LOOP_BREAKING = {"frequency_penalty": 1.0}
# ... and may not repeat any run of this many tokens (worker/repeats.py): it cannot loop again.
NO_REPEAT_TOKENS = 6


@dataclass(frozen=True)
class SummarySpec:
    """How a document is summarized, made once at submit, stored once (a `prompts` row, named
    by its hash) and carried whole by the claim to the engine and its logits rules."""

    instruction: str
    max_tokens: int  # the summary's length in tokens at most
    max_sentences: int | None = None  # the summary ends after this many; None: no limit
    schema: str | None = None  # JSON schema text: the summary is JSON of it (submit --schema)

    def __post_init__(self) -> None:
        if self.max_sentences is not None and self.max_sentences < 1:
            raise ValueError(f"max_sentences is a count or None, not {self.max_sentences!r}")

    @cached_property  # read for every document's key and row: worked out once per spec
    def hash(self) -> str:
        """A short, stable name for these settings, as stored in results and prompts."""
        identity = [PROMPT_FORMAT, self.instruction, self.max_tokens, self.max_sentences or 0]
        identity += [TEMPERATURE, LOOP_BREAKING, NO_REPEAT_TOKENS]
        if self.schema is not None:  # only then: the hashes of batches without one stay
            identity.append(self.schema)
        return hashlib.sha256(json.dumps(identity).encode("utf-8")).hexdigest()[:16]

    @property
    def row(self) -> dict:
        """As a row of `prompts`, which the worker reads a document's spec from."""
        return {
            "prompt_hash": self.hash,
            "instruction": self.instruction,
            "max_tokens": self.max_tokens,
            "max_sentences": self.max_sentences,
            "schema": self.schema,
        }

    @classmethod
    def of_row(cls, row) -> SummarySpec:
        """The spec a `prompts` row stores."""
        return cls(row.instruction, row.max_tokens, row.max_sentences or None, row.schema)

    def sampling(self, loop_breaking: bool = False, watch_loops: bool = False) -> dict:
        """The keyword arguments of vLLM's SamplingParams for one request (extra_args are
        read by worker/rules.py); `loop_breaking`: with the settings that break a loop;
        `watch_loops`: ending as soon as it loops (a first try that is generated again if
        it does)."""
        params: dict = {"max_tokens": self.max_tokens, "temperature": TEMPERATURE}
        extra: dict = {}
        if self.max_sentences:
            extra["max_sentences"] = self.max_sentences
        if loop_breaking:
            extra |= LOOP_BREAKING
            extra["no_repeat_ngram"] = NO_REPEAT_TOKENS
        elif watch_loops:
            extra["stop_looping"] = LOOP_RUN_WORDS  # worker/loops.py
        if extra:
            params["extra_args"] = extra
        return params


def result_key(content_hash: str, model: str, prompt: str) -> str:
    """The identity of one summary: rows with the same key share one generation."""
    identity = json.dumps([content_hash, model, prompt])
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()
