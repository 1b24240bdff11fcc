"""A summary generated again to break a loop cannot repeat a run of tokens."""

from __future__ import annotations

from core.prompt import NO_REPEAT_TOKENS, SummarySpec
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
    spec = SummarySpec("Summarize.", 128, max_sentences=3)
    first = spec.sampling()
    second = spec.sampling(loop_breaking=True)

    assert first == {"max_tokens": 128, "temperature": 0.0, "extra_args": {"max_sentences": 3}}
    assert "frequency_penalty" not in second  # vLLM's would cost every request of the batch
    assert second["extra_args"] == {
        "max_sentences": 3,
        "frequency_penalty": 1.0,  # worker/rules.py applies it to this request alone
        "no_repeat_ngram": NO_REPEAT_TOKENS,
    }
    assert "extra_args" not in SummarySpec("Summarize.", 64).sampling()


def rules_with(penalties: dict):
    """The engine's rules with only these frequency penalties (its tokenizer is not needed)."""
    from worker.rules import SummaryRules

    rules = object.__new__(SummaryRules)
    rules.counts, rules.repeats, rules.watches, rules.penalties = {}, {}, {}, penalties
    return rules


def test_the_frequency_penalty_is_vllms_and_touches_only_the_rows_that_ask_for_it():
    import torch
    from vllm.v1.sample.ops.penalties import apply_all_penalties

    torch.manual_seed(7)
    logits = torch.randn(3, 50)
    outputs = [[4, 4, 9, 4, 1], [4, 2], []]
    expected = apply_all_penalties(
        logits.clone(),
        torch.zeros(3, 1, dtype=torch.int64),  # prompts: counted only for repetition_penalty
        torch.zeros(3),
        torch.tensor([1.0, 0.0, 0.5]),
        torch.ones(3),
        outputs,
    )

    found = rules_with({0: (1.0, outputs[0]), 2: (0.5, outputs[2])}).apply(logits.clone())

    assert torch.equal(found, expected)
    assert torch.equal(found[1], logits[1])
    assert found[0, 4] == logits[0, 4] - 3.0


def test_a_frequency_penalty_out_of_range_is_refused_when_the_request_is_made():
    from types import SimpleNamespace

    import pytest

    from worker.rules import SummaryRules

    for bad in (0, -1.0, 2.5, "1", True):
        with pytest.raises(ValueError, match="frequency_penalty must be above 0 and at most 2"):
            SummaryRules.validate_params(SimpleNamespace(extra_args={"frequency_penalty": bad}))
    SummaryRules.validate_params(SimpleNamespace(extra_args={"frequency_penalty": 1.0}))
