"""A first try that loops, ended as soon as its loop shows, so its second try starts at once.

A final summary that loops is generated again with the settings that break loops
(worker/parts.py), and every token the first try wrote is thrown away; one that loops
from its fortieth token on spends the rest of its length on the loop, and its second
try waits for that. A request with `extra_args={"stop_looping": N}` (worker/rules.py)
ends as soon as the tokens of its last N words have come three times: its text then holds
an N-word run three times, which `core.quality.loops` calls a loop (N = 8), so it is
generated again exactly as if it had run to its length.

A word starts at a token that is a space then a letter or digit; the words between two
such tokens are the same whenever their tokens are, and the text's words (split at every
other character too) are at least as many. A loop `loops` sees sooner, a short sentence
three times, is left to the length cap as before.
"""

from __future__ import annotations

from core.quality import LOOP_TIMES


def word_starts(pieces: list[str]) -> list[bool]:
    """Per token: whether its text is a space then a letter or digit (a word's start)."""
    return [len(piece) > 1 and piece[0] == " " and piece[1].isalnum() for piece in pieces]


class LoopWatch:
    """One request's runs of `words` words so far, read from its live list of output tokens."""

    __slots__ = ("words", "output", "stops", "seen", "starts", "runs", "looped")

    def __init__(self, words: int, output: list[int], stops: list[int]):
        self.words, self.output, self.stops = words, output, stops
        self.seen = 0
        self.starts: list[int] = []  # where each word of the output starts
        self.runs: dict[tuple[int, ...], int] = {}
        self.looped = False

    def update(self, is_start: list[bool]) -> bool:
        """Read the new tokens; whether the request must stop now (and from then on)."""
        output, starts, words = self.output, self.starts, self.words
        for at in range(self.seen, len(output)):
            token = output[at]
            if token >= len(is_start) or not is_start[token]:
                continue
            if len(starts) >= words:  # the words from starts[-words] to here are whole
                run = tuple(output[starts[-words] : at])
                times = self.runs.get(run, 0) + 1
                self.runs[run] = times
                self.looped = self.looped or times >= LOOP_TIMES
            starts.append(at)
        self.seen = len(output)
        return self.looped
