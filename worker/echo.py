"""The instant engine (`SUMMARIZE_MODEL=echo`): every document's first sentence, at once.

It loads no model and needs no GPU, so a deployment can be smoke-tested end to
end (submit, Redis, the worker, SQL, the dashboards) on any machine, and the
pipeline's own cost per document can be measured with the engine taken out.
Words are its tokens, and its token counts are honest counts of them: the
prompt is the instruction's words and the text's words, the summary is the
text's first sentence, cut at `max_tokens` words (`finish_reason` "length").
"""

from __future__ import annotations

import contextlib
import re

from core.prompt import SummarySpec
from worker.engine import Finished

MODEL = "echo"  # SUMMARIZE_MODEL that selects it, and `results.model` of its rows
_SEPARATOR = 0  # token between the instruction and the text
VOCABULARY_WORDS = 10_000  # forget the words past this many, between steps: memory stays flat
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")


class EchoEngine:
    """The `Engine` of `worker/engine.py` without a model: each request finishes on the next step."""

    def __init__(self, max_model_len: int):
        self.max_model_len = max_model_len
        self._ids: dict[str, int] = {}  # word -> token id (ids start at 1; 0 separates)
        self._words: list[str] = [""]
        self._instructions: dict[str, list[int]] = {}
        self._running: dict[str, tuple[list[int], int]] = {}

    def token_ids(self, text: str) -> list[int]:
        ids, words = self._ids, self._words
        out = []
        for word in text.split():
            token = ids.get(word)
            if token is None:
                token = ids[word] = len(words)
                words.append(word)
            out.append(token)
        return out

    def reading(self, texts: list[str]) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()  # its tokens are words: nothing to gain

    def text_of(self, token_ids: list[int]) -> str:
        words = self._words
        return " ".join(words[t] for t in token_ids if t != _SEPARATOR)

    def prompt_ids(self, instruction: str, text: str) -> list[int]:
        head = self._instructions.get(instruction)
        if head is None:
            head = self._instructions[instruction] = [*self.token_ids(instruction), _SEPARATOR]
        return head + self.token_ids(text)

    def add(
        self,
        request_id: str,
        prompt_ids: list[int],
        spec: SummarySpec,
        loop_breaking: bool = False,
        watch_loops: bool = False,
        follow_up: bool = False,
    ) -> None:
        max_tokens = spec.max_tokens  # a sentence limit or schema changes nothing here
        if len(prompt_ids) + max_tokens > self.max_model_len:
            raise ValueError(
                f"a prompt of {len(prompt_ids)} tokens and {max_tokens} to generate do not fit "
                f"in the {self.max_model_len}-token context"
            )
        self._running[request_id] = (prompt_ids, max_tokens)

    def step(self) -> list[Finished]:
        running, self._running = self._running, {}
        finished = [self._answer(rid, prompt, most) for rid, (prompt, most) in running.items()]
        if len(self._words) > VOCABULARY_WORDS:  # no token id is held by anyone now
            self._ids.clear()
            self._words[1:] = []
            self._instructions.clear()
        return finished

    def _answer(self, request_id: str, prompt: list[int], max_tokens: int) -> Finished:
        text = prompt[prompt.index(_SEPARATOR) + 1 :]
        words = self._words
        sentence: list[int] = []
        for token in text:
            sentence.append(token)
            if _SENTENCE_END.search(words[token]):
                break
        cut = len(sentence) > max_tokens
        sentence = sentence[:max_tokens]
        return Finished(
            request_id=request_id,
            text=self.text_of(sentence),
            prompt_tokens=len(prompt),
            completion_tokens=len(sentence),
            cached_tokens=0,
            finish_reason="length" if cut else "stop",
        )

    def unfinished(self) -> int:
        return len(self._running)

    def abort(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            self._running.pop(request_id, None)

    def close(self, timeout_s: float = 10.0, wait: bool = True) -> None:
        self._running.clear()
