"""A final summary's first try ends as soon as it loops, and only when its text loops."""

from __future__ import annotations

import random

from core.prompt import SummarySpec
from core.quality import LOOP_RUN_WORDS, loops
from worker.loops import OPENS, SPACED, STARTS, LoopWatch, word_starts

# A made-up vocabulary: words with a space before them, pieces of words, and punctuation.
PIECES = [
    " the",
    " council",
    " met",
    " on",
    " Monday",
    " to",
    " vote",
    " a",
    " new",
    " road",
    " budget",
    " and",
    " river",
    " school",
    ".",
    ",",
    "ing",
    "ed",
    "\n",
    " 3",
    "5",
    "%",
    "Title",
    ":",
    "\n\n",
    "The",
]
KINDS = word_starts(PIECES)
SENTENCE = [0, 1, 2, 3, 4, 5, 6, 3, 0, 8, 9, 14]  # " the council met on Monday to vote on …."


def text(tokens: list[int]) -> str:
    return "".join(PIECES[t] for t in tokens).strip()


def watched(tokens: list[int], n: int = LOOP_RUN_WORDS) -> int | None:
    """How many tokens were written when the watch said stop, or None."""
    output: list[int] = []
    watch = LoopWatch(n, output, stops=[99])
    for token in tokens:
        output.append(token)
        if watch.update(KINDS):
            return len(output)
    return None


def test_a_word_starts_after_a_space_or_a_line_break():
    assert word_starts([" the", "the", " 3", " .", " ", "ing", "\nThe", "\n\n", ":"]) == [
        STARTS,
        OPENS,  # a word's start after a token that ends in a space
        STARTS,
        0,
        SPACED,
        OPENS,
        STARTS,
        SPACED,
        0,
    ]


def test_a_word_at_the_start_of_a_line_starts_a_word_and_one_after_a_mark_does_not():
    headline, colon, line_break, piece = 22, 23, 24, 16  # "\n\n", "Title", ":", "ing"
    assert watched([headline, colon, line_break] * 40) is not None
    assert watched([headline, colon, piece] * 40) is None  # "Title:ingTitle:ing…": one word


def test_a_headline_said_line_after_line_is_stopped_long_before_the_length_cap():
    headline = [22, 23, 0, 12, 14, 24]  # "Title: the river.\n\n"
    output = headline + [22, 23, 24] * 40  # "Title:\n\n" again and again

    stopped = watched(output)

    assert stopped is not None and stopped < 40
    assert loops(text(output[:stopped]))


def test_a_sentence_said_again_and_again_is_stopped_once_a_run_comes_a_third_time():
    opening = [0, 10, 11, 0, 12, 14]  # " the budget and the river."
    output = opening + SENTENCE * 6

    stopped = watched(output)

    assert stopped is not None and stopped < len(output)
    assert loops(text(output[:stopped]))  # what it wrote loops: it is generated again
    assert watched(output[: stopped - 1]) is None  # not one token sooner


def test_a_summary_that_does_not_loop_runs_to_its_end():
    rng = random.Random(3)
    output = [rng.randrange(len(PIECES)) for _ in range(128)]

    assert watched(output) is None


def test_tokens_without_words_never_stop_it():
    marks = [14, 15, 18, 21] * 40  # ".,\n%" again and again: no word, no loop of words

    assert watched(marks) is None


def test_whenever_the_watch_stops_a_try_its_text_loops():
    rng = random.Random(11)
    stops = 0
    for _ in range(2000):
        sentence = [rng.randrange(len(PIECES)) for _ in range(rng.randrange(3, 30))]
        noise = [rng.randrange(len(PIECES)) for _ in range(rng.randrange(0, 40))]
        output = noise + sentence * rng.randrange(1, 8)
        stopped = watched(output)
        if stopped is not None:
            stops += 1
            assert loops(text(output[:stopped])), text(output[:stopped])
    assert stops > 500  # most of these loop long enough to be stopped


def test_only_a_first_try_is_watched_and_a_second_try_is_not():
    spec = SummarySpec("Summarize.", 128)

    assert spec.sampling(watch_loops=True)["extra_args"] == {"stop_looping": LOOP_RUN_WORDS}
    second = spec.sampling(loop_breaking=True, watch_loops=True)["extra_args"]
    assert "stop_looping" not in second and "no_repeat_ngram" in second


def test_the_engines_rules_leave_a_looping_row_only_its_stop_tokens():
    import torch

    from worker.rules import SummaryRules

    looping = [0, 10, 11, 14, *SENTENCE * 6]
    rules = object.__new__(SummaryRules)
    rules.counts, rules.repeats, rules.penalties = {}, {}, {}
    rules.starts = KINDS
    rules.watches = {
        0: LoopWatch(LOOP_RUN_WORDS, looping, stops=[2, 5]),
        1: LoopWatch(LOOP_RUN_WORDS, [0, 1, 2, 3], stops=[2, 5]),
    }
    logits = torch.randn(2, len(PIECES))

    found = rules.apply(logits.clone())

    assert torch.isinf(found[0]).sum() == len(PIECES) - 2
    assert torch.equal(found[0, [2, 5]], logits[0, [2, 5]])  # as likely against each other
    assert torch.equal(found[1], logits[1])
