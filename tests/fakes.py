"""A deterministic stand-in for the vLLM engine, for unit tests of the drain loop.

Words are tokens. A prompt is `<s> instruction words <sep> text words <e>`; a
summary is `summary of N tokens` and costs min(max_tokens, 4) tokens. A prompt holding
the word `loopy` gets a summary that loops, unless asked with the settings that break
loops; one holding `stuck` loops whatever it is asked with. Each step
finishes at most `per_step` requests, oldest first, like a busy engine would, except that
a document's follow-ups (a second try, a combining pass) go first, as in vLLM's priority
scheduling.
"""

from __future__ import annotations

import contextlib
import threading

from core.prompt import SummarySpec
from worker.engine import Finished

SPECIAL = {"<s>": 1, "<sep>": 2, "<e>": 3}


# What a looping request answers: a run of 8 words three times in one sentence, a loop that
# dropping sentences said again cannot mend (worker/parts.py)
LOOP = "It goes round and round and on and on " * 3


class FakeEngine:
    def __init__(
        self,
        max_model_len: int = 256,
        per_step: int = 1_000,
        explode_on: str | None = None,
        refuse_on: str | None = None,
        gate: threading.Semaphore | None = None,
    ):
        self.max_model_len = max_model_len
        self.per_step = per_step
        self.explode_on = explode_on  # a word whose prompt makes step() raise, like a driver fault
        self.refuse_on = refuse_on  # a word whose prompt add() refuses, as for one bad document
        self.gate = gate  # when given, each step waits for a release: the test sets the pace
        self.vocab: dict[str, int] = dict(SPECIAL)
        self.words: dict[int, str] = {v: k for k, v in SPECIAL.items()}
        self.running: list[tuple[str, list[int], int]] = []
        self.added: list[str] = []
        self.loop_breaking: list[str] = []  # requests asked with the settings that break loops
        self.follow_ups: set[str] = set()  # a document's later requests: they go first
        self.finished: list[str] = []  # request ids, in the order they finished
        self.max_sentences: dict[str, int | None] = {}  # each request's limit of sentences
        self.asked: list[tuple[str, int]] = []  # each request's prompt (as words) and length
        self.schemas: dict[str, str | None] = {}  # each request's JSON schema
        self.read_together: list[list[str]] = []  # the texts of each `reading`
        self.peak_unfinished = 0
        self.steps = 0
        self.closed = False

    def token_ids(self, text: str) -> list[int]:
        ids = []
        for word in text.split():
            if word not in self.vocab:
                self.vocab[word] = len(self.vocab) + 10
                self.words[self.vocab[word]] = word
            ids.append(self.vocab[word])
        return ids

    @contextlib.contextmanager
    def reading(self, texts: list[str]):
        self.read_together.append(list(texts))
        yield

    def text_of(self, token_ids: list[int]) -> str:
        return " ".join(self.words[i] for i in token_ids if i not in SPECIAL.values())

    def prompt_ids(self, instruction: str, text: str) -> list[int]:
        return [1, *self.token_ids(instruction), 2, *self.token_ids(text), 3]

    def add(
        self,
        request_id: str,
        prompt_ids: list[int],
        spec: SummarySpec,
        loop_breaking: bool = False,
        watch_loops: bool = False,
        follow_up: bool = False,
    ) -> None:
        max_tokens = spec.max_tokens
        if loop_breaking:
            self.loop_breaking.append(request_id)
        self.max_sentences[request_id] = spec.max_sentences
        self.asked.append((self.text_of(prompt_ids), max_tokens))
        self.schemas[request_id] = spec.schema
        if self.refuse_on and self.refuse_on in self.text_of(prompt_ids).split():
            raise ValueError("the engine refused this prompt")
        if len(prompt_ids) + max_tokens > self.max_model_len:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens does not fit")
        entry = (request_id, prompt_ids, max_tokens)
        if follow_up:  # behind the other follow-ups, before every new request
            self.running.insert(sum(r[0] in self.follow_ups for r in self.running), entry)
            self.follow_ups.add(request_id)
        else:
            self.running.append(entry)
        self.added.append(request_id)
        self.peak_unfinished = max(self.peak_unfinished, len(self.running))

    def step(self) -> list[Finished]:
        if self.gate is not None:
            self.gate.acquire()
        self.steps += 1
        done, self.running = self.running[: self.per_step], self.running[self.per_step :]
        finished = []
        for request_id, prompt, max_tokens in done:
            self.finished.append(request_id)
            if self.explode_on and self.explode_on in self.text_of(prompt).split():
                raise RuntimeError("engine died")
            words = self.text_of(prompt).split()
            looping = "stuck" in words or (
                "loopy" in words and request_id not in self.loop_breaking
            )
            text = LOOP if looping else f"summary of {len(prompt)} tokens"
            finished.append(
                Finished(
                    request_id=request_id,
                    text=text.strip(),
                    prompt_tokens=len(prompt),
                    completion_tokens=min(max_tokens, 4),
                    cached_tokens=0,
                    finish_reason="stop" if max_tokens > 4 else "length",
                )
            )
        return finished

    def unfinished(self) -> int:
        return len(self.running)

    def abort(self, request_ids: list[str]) -> None:
        self.running = [r for r in self.running if r[0] not in set(request_ids)]

    def close(self, timeout_s: float = 10.0, wait: bool = True) -> None:
        self.closed = True
