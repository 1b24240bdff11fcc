"""One document's way through the engine, split into parts when it is longer than the context.

A document that fits is one request. A longer one is cut by the model's own
tokenizer into overlapping windows; their summaries go through the engine in the
same wave as everyone else's, then one text is summarized under the document's own
instruction: the document's opening as written (as much of its first part as fits, to its
last sentence: a paper's abstract, an article's lead) and the summaries of the other parts,
in order. When under a quarter of the first part fits, the text is every part's summary
after the document's `Title: …` line, summarized again in parts if it is still too long (up
to MAX_LEVELS). The model is told nothing about summaries: what it is told, it copies.

A final summary that says a sentence again keeps what it said before, without the
sentences that repeat (core/quality.py `without_repeats`): on aclsum's papers as good by
ROUGE-L as a second try, for far fewer tokens (docs/performance.md). It is generated once
more, at most, only when that leaves nothing usable: one that loops within its sentences
(its first try ends as soon as it does: worker/loops.py) or copies the instruction, from the
same prompt with the settings that break loops (flagged if it still loops or copies); one
that is only a headline, of a text that opens with its `Title: …` line, from the text
without that line; a JSON summary (a --schema batch) cut at its length before its JSON
closed, with twice the room, as far as the context allows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from core.prompt import SummarySpec
from core.quality import Signals, parses, signals, title_only, usable, without_repeats
from worker.engine import Engine, Finished

MAX_LEVELS = 5
PROMPT_SLACK_TOKENS = 8  # re-tokenizing a decoded window can add a token or two
MIN_WINDOW_TOKENS = 32
BREAKING = ("leaked", "repeated")  # flaws the settings that break loops mend (core/quality.py)
TITLE = "Title: "  # the line jobs/markup.py and jobs/formats.py open a titled document with


class DocumentTooLong(Exception):
    """The document cannot be brought within the context, even in parts."""


def split(token_ids: list[int], size: int, overlap: int) -> list[list[int]]:
    """Windows of at most `size` tokens covering `token_ids`, each sharing `overlap` with the last."""
    if size <= 0 or not 0 <= overlap < size:
        raise ValueError(f"need 0 <= overlap < size, got size={size}, overlap={overlap}")
    if len(token_ids) <= size:
        return [list(token_ids)]
    windows, start, stride = [], 0, size - overlap
    while True:
        windows.append(list(token_ids[start : start + size]))
        if start + size >= len(token_ids):
            return windows
        start += stride


def overlap_for(window: int) -> int:
    """Overlap between windows: an eighth of a window, at most 128 tokens."""
    return min(128, window // 8)


@dataclass(frozen=True)
class Request:
    request_id: str
    prompt_ids: list[int]
    spec: SummarySpec  # a part's summary has the document's spec without its schema
    loop_breaking: bool = False  # with the settings that break a loop (core/prompt.py)
    watch_loops: bool = False  # ends once it loops: a final summary's first try


@dataclass
class Work:
    """A document being summarized: its pending requests and the tokens spent so far."""

    key: str
    spec: SummarySpec  # the final summary's; parts are text (no schema)
    engine: Engine
    new_id: Callable[[], str]
    template_tokens: int | None = None  # the instruction's prompt around an empty document
    document_tokens: int = 0
    regenerated: bool = False  # the final summary looped and was generated again
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    parts: int = 0
    level: int = 0
    result: Finished | None = None
    _pending: dict[str, int] = field(default_factory=dict)
    _texts: list[str | None] = field(default_factory=list)
    _prompts: list[list[int]] = field(default_factory=list)
    _body: str = ""
    _text: str = ""  # what this level summarizes: the document, then its parts' summaries
    _opening: list[int] = field(default_factory=list)  # the document's first part's tokens
    _signals: tuple[str, str, Signals] | None = None  # a final text, its body, their signals

    def start(self, body: str) -> list[Request]:
        self._body = body
        requests = self._plan(body)
        self.parts = len(requests)
        return requests

    @property
    def done(self) -> bool:
        return self.result is not None

    def request_ids(self) -> list[str]:
        return list(self._pending)

    def finish(self, finished: Finished) -> list[Request]:
        """Take one finished request; returns the next level's requests when a level completes."""
        slot = self._pending.pop(finished.request_id)
        self.prompt_tokens += finished.prompt_tokens
        self.completion_tokens += finished.completion_tokens
        self.cached_tokens += finished.cached_tokens or 0
        self._texts[slot] = finished.text
        if self._pending:
            return []
        if len(self._texts) == 1:
            again = [] if self.regenerated else self._again(finished)
            if again:
                self.regenerated = True
                return again
            self.result = self._mended(finished)
            return []
        self.level += 1
        if self.level >= MAX_LEVELS:
            raise DocumentTooLong(
                f"still too long after {MAX_LEVELS} rounds of combining part summaries: "
                "raise SUMMARIZE_MAX_MODEL_LEN or lower SUMMARIZE_MAX_TOKENS"
            )
        first, *rest = [(text or "").strip() for text in self._texts]
        rest = [text for text in rest if text]
        opening = self._opening_beside(rest) if self.level == 1 else None
        if opening:
            return self._plan("\n\n".join([opening, *rest]))
        title = self._body.partition("\n")[0] if self._body.startswith(TITLE) else None
        return self._plan("\n\n".join(filter(None, [title, first, *rest])))

    def _opening_beside(self, summaries: list[str]) -> str | None:
        """As much of the document's first part as fits in one prompt beside the summaries of
        the other parts, cut at its last sentence; None when under a quarter of it fits."""
        limit = self.engine.max_model_len - self.spec.max_tokens - 2 * PROMPT_SLACK_TOKENS
        room = limit - self._overhead() - len(self.engine.token_ids("\n\n".join(summaries)))
        if room < len(self._opening) // 4:
            return None
        text = self.engine.text_of(self._opening[:room])
        end = max(text.rfind(". "), text.rfind("\n"))
        return text[: end + 1].strip() if end > len(text) * 2 // 3 else text.strip()

    def signals(self, body: str) -> Signals:
        """The final summary's quality signals against the document's `body` (the row's), worked
        out once: deciding whether to generate it again read them first."""
        assert self.result is not None
        return self._signals_of(self.result.text, body)

    def _signals_of(self, text: str, body: str) -> Signals:
        if self._signals is None or self._signals[:2] != (text, body):
            json = self.spec.schema is not None
            self._signals = (text, body, signals(text, body, self.spec.instruction, json=json))
        return self._signals[2]

    def _mended(self, finished: Finished) -> Finished:
        """The final summary, without the sentences it says again."""
        text = finished.text if self.spec.schema else without_repeats(finished.text)
        return finished if text == finished.text else replace(finished, text=text)

    def _again(self, finished: Finished) -> list[Request]:
        """The final summary's requests once more, if it looped, is a headline, or its JSON
        was cut open (see the module's docstring)."""
        if not self.spec.schema:
            text = finished.text
            found = self._signals_of(text, self._body)
            if found.looped or found.flaw in BREAKING:
                if usable(without_repeats(text), self._body, self.spec.instruction):
                    return []  # what it said before repeating itself: _mended keeps it
                return self._issue(self._prompts, loop_breaking=True)
            untitled = _untitled(self._text)
            if (
                untitled is None
                or finished.finish_reason != "stop"
                or not title_only(finished.text)
            ):
                return []
            return self._issue([self.engine.prompt_ids(self.spec.instruction, untitled)])
        if finished.finish_reason != "length" or parses(finished.text):
            return []
        room = self.engine.max_model_len - len(self._prompts[0])
        longer = min(2 * self.spec.max_tokens, room)
        if longer <= self.spec.max_tokens:
            return []
        return self._issue(self._prompts, spec=replace(self.spec, max_tokens=longer))

    def _plan(self, text: str) -> list[Request]:
        self._text = text
        instruction = self.spec.instruction
        limit = self.engine.max_model_len - self.spec.max_tokens
        whole = self.engine.prompt_ids(instruction, text)
        if len(whole) <= limit:
            if not self.level:
                self.document_tokens = len(whole) - self._overhead()
            return self._issue([whole], watch_loops=self.spec.schema is None)
        overhead = self._overhead()
        window = limit - overhead - PROMPT_SLACK_TOKENS
        if window < MIN_WINDOW_TOKENS:
            raise DocumentTooLong(
                f"the instruction ({overhead} tokens) and summary length ({self.spec.max_tokens} "
                f"tokens) leave no room for text in a {self.engine.max_model_len}-token context: "
                "shorten SUMMARIZE_PROMPT, lower SUMMARIZE_MAX_TOKENS or raise "
                "SUMMARIZE_MAX_MODEL_LEN"
            )
        token_ids = self.engine.token_ids(text)
        if not self.level:
            self.document_tokens = len(token_ids)
        prompts = []
        pieces = split(token_ids, window, overlap_for(window))
        if not self.level:
            self._opening = pieces[0]
        for piece in pieces:
            prompt = self.engine.prompt_ids(instruction, self.engine.text_of(piece))
            while len(prompt) > limit:  # decoding and re-encoding merged some tokens differently
                piece = piece[: len(piece) - (len(prompt) - limit)]
                prompt = self.engine.prompt_ids(instruction, self.engine.text_of(piece))
            prompts.append(prompt)
        return self._issue(prompts)

    def _overhead(self) -> int:
        """The prompt's tokens around an empty document (given, or counted once)."""
        if self.template_tokens is None:
            self.template_tokens = len(self.engine.prompt_ids(self.spec.instruction, ""))
        return self.template_tokens

    @property
    def _part_spec(self) -> SummarySpec:
        return replace(self.spec, schema=None) if self.spec.schema else self.spec

    def _issue(
        self,
        prompts: list[list[int]],
        loop_breaking: bool = False,
        spec: SummarySpec | None = None,
        watch_loops: bool = False,
    ) -> list[Request]:
        self._texts = [None] * len(prompts)
        self._prompts = prompts
        requests = []
        if spec is None:
            spec = self.spec if len(prompts) == 1 else self._part_spec  # one: the final summary
        for slot, prompt in enumerate(prompts):
            request = Request(self.new_id(), prompt, spec, loop_breaking, watch_loops)
            self._pending[request.request_id] = slot
            requests.append(request)
        return requests


def _untitled(body: str) -> str | None:
    """The text without the `Title: …` line it opens with, or None when it has none or
    nothing else."""
    if not body.startswith(TITLE):
        return None
    rest = body.partition("\n")[2].strip()
    return rest or None
