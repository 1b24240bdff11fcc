"""What makes two summaries the same: the document, the model, the instruction, the length.

A result is reused only when all of these match; changing any of them (or the way
prompts are laid out, PROMPT_FORMAT) makes new summaries.
"""

from __future__ import annotations

import hashlib
import json

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


def sampling(max_tokens: int, *, loop_breaking: bool = False, max_sentences: int | None = None):
    """The keyword arguments of vLLM's SamplingParams for one request (extra_args are read by
    worker/rules.py)."""
    params: dict = {"max_tokens": max_tokens, "temperature": TEMPERATURE}
    extra: dict = {}
    if max_sentences:
        extra["max_sentences"] = max_sentences
    if loop_breaking:
        extra |= LOOP_BREAKING
        extra["no_repeat_ngram"] = NO_REPEAT_TOKENS
    if extra:
        params["extra_args"] = extra
    return params


def prompt_hash(
    instruction: str, max_tokens: int, max_sentences: int = 0, schema: str | None = None
) -> str:
    """A short, stable name for the instruction and sampling settings, as stored in results."""
    identity = [PROMPT_FORMAT, instruction, max_tokens, max_sentences, TEMPERATURE]
    identity += [LOOP_BREAKING, NO_REPEAT_TOKENS]
    if schema is not None:  # only then: the hashes of batches without one stay as they were
        identity.append(schema)
    return hashlib.sha256(json.dumps(identity).encode("utf-8")).hexdigest()[:16]


def result_key(content_hash: str, model: str, prompt: str) -> str:
    """The identity of one summary: rows with the same key share one generation."""
    identity = json.dumps([content_hash, model, prompt])
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()
