"""No run of tokens twice: what a summary generated again to break a loop may not write.

A request with `extra_args={"no_repeat_ngram": N}` (worker/rules.py) may not write a
token that would repeat a run of N tokens already in its output, so it cannot say a
sentence, or any longer run, again (N = 6 tokens: shorter than the 8 words the loop
check counts). Each step indexes only the tokens written since the last one.
"""

from __future__ import annotations


class Repeats:
    """One request's runs so far, read from its live list of output tokens."""

    __slots__ = ("n", "output", "seen", "follows")

    def __init__(self, n: int, output: list[int]):
        self.n, self.output = n, output
        self.seen = 0
        self.follows: dict[tuple[int, ...], set[int]] = {}  # n-1 tokens -> what came next

    def banned(self) -> set[int]:
        """The tokens that would end a run of n tokens the output holds already."""
        output, n = self.output, self.n
        for end in range(max(self.seen, n - 1), len(output)):
            self.follows.setdefault(tuple(output[end - n + 1 : end]), set()).add(output[end])
        self.seen = len(output)
        if len(output) < n - 1:
            return set()
        return self.follows.get(tuple(output[len(output) - n + 1 :]), set())
