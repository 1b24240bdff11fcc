"""The sentence limit's rule: which tokens end a sentence, counted as a summary grows."""

from __future__ import annotations

from worker.sentences import Count, token_kinds

PIECES = [
    "The",
    " cat",
    " sat",
    ".",  # 1: a stop after a word
    " The",
    " U",
    ".",
    "S",
    ".",
    " team",  # no end: U.S. is letters, not words
    " rose",
    " 3",
    ".",
    "5",
    "%",
    " today",
    '."',  # no end in 3.5; then 2, closed by a quote
    " At",
    " 10",
    " p",
    ".",
    "m",
    ".",
    " it",
    " ended",
    "!\n",  # none in p.m.; then 3
    " Really",
    "?",  # 4
]


def sentences_after_each(pieces: list[str], limit: int) -> list[tuple[int, bool]]:
    """(sentences so far, whether to stop now) after each token, as the engine sees them."""
    ends, letters = token_kinds(pieces)
    output: list[int] = []
    count = Count(limit, output, stops=[0])
    seen = []
    for token in range(len(pieces)):
        output.append(token)
        seen.append((count.update(ends, letters), count.sentences))
    return [(n, stop) for stop, n in seen]


def test_a_sentence_ends_at_a_stop_after_a_word_not_inside_numbers_or_initials():
    counted = sentences_after_each(PIECES, limit=99)

    ends_at = [i for i, (n, _) in enumerate(counted) if i and n > counted[i - 1][0]]
    assert [PIECES[i] for i in ends_at] == [".", '."', "!\n", "?"]
    assert counted[-1][0] == 4


def test_the_limit_stops_right_after_the_sentence_that_reaches_it_and_not_before():
    counted = sentences_after_each(PIECES, limit=2)

    stops = [i for i, (_, stop) in enumerate(counted) if stop]
    assert PIECES[stops[0]] == '."'  # the second sentence's end, its quote included
    assert not any(stop for _, stop in counted[: stops[0]])
    assert not counted[stops[0] + 1][1]  # a token after it is not an end: no stop there


def test_a_token_that_holds_a_word_and_its_stop_counts_by_itself():
    ends, _ = token_kinds(["ended.", "A.", "3.", "end!)", "  "])

    assert ends == [1, 0, 0, 1, 0]
