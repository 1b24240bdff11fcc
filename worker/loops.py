"""A first try that loops, ended as soon as its loop shows, so its second try starts at once.

A final summary that loops is generated again with the settings that break loops
(worker/parts.py), and every token the first try wrote is thrown away; one that loops
from its fortieth token on spends the rest of its length on the loop, and its second
try waits for that. A request with `extra_args={"stop_looping": N}` (worker/rules.py)
ends as soon as the tokens of its last N words have come three times: its text then holds
an N-word run three times, which `core.quality.loops` calls a loop (N = 8), so it is
generated again exactly as if it had run to its length.

A word starts at a token that is a space then a letter or digit, or that opens with a
letter or digit after a token that ends in a space or a line break (`Title` in
`Title:\n\nTitle:`, a line's first word). Either way the text breaks between words there,
so the words between two such tokens are the same whenever their tokens are, and the text's
words (split at every other character too) are at least as many. A loop `loops` sees
sooner, a short sentence three times, is left to the length cap as before.
"""

from __future__ import annotations

from core.quality import LOOP_TIMES

STARTS, OPENS, SPACED = 1, 2, 4  # a token's kinds, as bits: see word_starts


def word_starts(pieces: list[str]) -> list[int]:
    """Per token, as bits: STARTS a word (a space or line break, then a letter or digit),
    OPENS with a letter or digit (a word's start after a SPACED token), ends SPACED."""
    kinds = []
    for piece in pieces:
        kind = STARTS if len(piece) > 1 and piece[0].isspace() and piece[1].isalnum() else 0
        kind |= OPENS if piece[:1].isalnum() else 0
        kind |= SPACED if piece[-1:].isspace() else 0
        kinds.append(kind)
    return kinds


class LoopWatch:
    """One request's runs of `words` words so far, read from its live list of output tokens."""

    __slots__ = ("words", "output", "stops", "seen", "starts", "runs", "looped")

    def __init__(self, words: int, output: list[int], stops: list[int]):
        self.words, self.output, self.stops = words, output, stops
        self.seen = 0
        self.starts: list[int] = []  # where each word of the output starts
        self.runs: dict[tuple[int, ...], int] = {}
        self.looped = False

    def update(self, kinds: list[int]) -> bool:
        """Read the new tokens (`kinds`: word_starts of the vocabulary); whether the request
        must stop now (and from then on)."""
        output, starts, words, known = self.output, self.starts, self.words, len(kinds)
        for at in range(self.seen, len(output)):
            token = output[at]
            kind = kinds[token] if token < known else 0
            if not kind & STARTS:
                before = output[at - 1] if at else known
                if not (kind & OPENS and before < known and kinds[before] & SPACED):
                    continue
            if len(starts) >= words:  # the words from starts[-words] to here are whole
                run = tuple(output[starts[-words] : at])
                times = self.runs.get(run, 0) + 1
                self.runs[run] = times
                self.looped = self.looped or times >= LOOP_TIMES
            starts.append(at)
        self.seen = len(output)
        return self.looped
