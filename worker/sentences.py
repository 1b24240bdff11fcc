"""Where a summary's sentences end, read token by token: the rule behind the sentence limit.

Small models asked for "two or three sentences" write five and are cut at the token cap
in the middle of the sixth. A request that carries `extra_args={"max_sentences": N}`
gets its end-of-sequence token as the only choice once its output holds N sentences and
its last token ends one, so the summary stops where a sentence stops (finish reason
`stop`) and spends no tokens on sentences nobody asked for.

A sentence ends at `.`, `!` or `?` (and the quotes or brackets that close on it) after a
word of two letters or more: `3.5`, `U.S.` and `p.m.` end none. worker/rules.py
is the vLLM side; this module imports neither vLLM nor torch.
"""

from __future__ import annotations

ENDS = ".!?"
CLOSING = "\"'”’)]»"


def token_kinds(pieces: list[str]) -> tuple[list[int], list[int]]:
    """Per token: whether it ends a sentence (0 no, 1 by itself, 2 if the token before ends in
    two letters), and how many letters it ends with (0, 1 or 2)."""
    ends, letters = [], []
    for piece in pieces:
        text = piece.rstrip()
        core = text.rstrip(CLOSING)
        tail = len(core) - len(core.rstrip(ENDS))
        if tail and core[:-tail]:  # "word." in one token: two letters before its stop
            word = core[:-tail]
            ends.append(1 if len(word) >= 2 and word[-2:].isalpha() else 0)
        elif tail:  # "." alone: it depends on the word before
            ends.append(2)
        else:
            ends.append(0)
        trailing = 0
        for char in reversed(text):
            if not char.isalpha() or trailing == 2:
                break
            trailing += 1
        letters.append(trailing if text == piece or not text else 0)
    return ends, letters


class Count:
    """One request's sentences so far, read from its live list of output tokens."""

    __slots__ = ("limit", "output", "seen", "sentences", "at_end", "stops")

    def __init__(self, limit: int, output: list[int], stops: list[int]):
        self.limit, self.output, self.stops = limit, output, stops
        self.seen = self.sentences = 0
        self.at_end = False

    def update(self, ends: list[int], letters: list[int]) -> bool:
        """Read the new tokens; whether the request must stop now."""
        output = self.output
        for i in range(self.seen, len(output)):
            kind = ends[output[i]] if output[i] < len(ends) else 0
            ended = kind == 1 or (kind == 2 and i > 0 and letters[output[i - 1]] == 2)
            self.sentences += ended
            self.at_end = ended
        self.seen = len(output)
        return self.at_end and self.sentences >= self.limit
