"""A summary generated again to break a loop cannot repeat a run of tokens."""

from __future__ import annotations

from core.prompt import NO_REPEAT_TOKENS, sampling
from worker.repeats import Repeats


def test_a_token_that_would_repeat_a_run_of_n_tokens_is_banned():
    output = [1, 2, 3, 9, 1, 2]
    repeats = Repeats(3, output)

    assert repeats.banned() == {3}  # 1 2 3 is in the output: after "1 2", 3 would repeat it
    output.append(4)
    assert repeats.banned() == set()  # "2 4" never came before
    output += [1, 2]
    assert repeats.banned() == {3, 4}  # both runs after "1 2" are taken


def test_nothing_is_banned_before_the_output_holds_a_whole_prefix():
    output = [5]
    repeats = Repeats(4, output)

    assert repeats.banned() == set()
    output += [5, 5]
    assert repeats.banned() == set()  # 5 5 5 once: the next 5 would repeat it only now
    output.append(5)
    assert repeats.banned() == {5}


def test_a_loop_cannot_come_back_when_every_banned_token_is_avoided():
    loop = [7, 8, 9, 10]  # a sentence the model would say forever
    output: list[int] = []
    repeats = Repeats(NO_REPEAT_TOKENS, output)
    for step in range(40):
        wanted = loop[step % len(loop)]
        output.append(wanted if wanted not in repeats.banned() else 100 + step)

    runs = [
        tuple(output[i : i + NO_REPEAT_TOKENS]) for i in range(len(output) - NO_REPEAT_TOKENS + 1)
    ]
    assert len(runs) == len(set(runs))


def test_only_the_second_try_is_asked_not_to_repeat_and_every_try_keeps_the_limit():
    first = sampling(128, max_sentences=3)
    second = sampling(128, loop_breaking=True, max_sentences=3)

    assert first == {"max_tokens": 128, "temperature": 0.0, "extra_args": {"max_sentences": 3}}
    assert second["frequency_penalty"] == 1.0
    assert second["extra_args"] == {"max_sentences": 3, "no_repeat_ngram": NO_REPEAT_TOKENS}
    assert "extra_args" not in sampling(64)
