"""Splitting long documents by tokens: windows, overlap, and the bound on combining rounds."""

from __future__ import annotations

import itertools

import pytest

from core.prompt import SummarySpec
from tests.fakes import FakeEngine
from worker.engine import Finished
from worker.parts import MAX_LEVELS, DocumentTooLong, Work, overlap_for, split


@pytest.mark.parametrize(
    ("length", "size", "overlap", "expected"),
    [
        (10, 10, 2, [(0, 10)]),
        (0, 10, 2, [(0, 0)]),
        (11, 10, 2, [(0, 10), (8, 11)]),
        (25, 10, 2, [(0, 10), (8, 18), (16, 25)]),
        (20, 10, 0, [(0, 10), (10, 20)]),
    ],
)
def test_windows_cover_the_tokens_with_the_overlap_asked_for(length, size, overlap, expected):
    tokens = list(range(length))
    assert split(tokens, size, overlap) == [tokens[a:b] for a, b in expected]


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (10, 10), (10, -1)])
def test_an_overlap_as_large_as_the_window_is_refused(size, overlap):
    with pytest.raises(ValueError):
        split([1, 2, 3], size, overlap)


def test_overlap_is_an_eighth_of_a_window_up_to_128_tokens():
    assert overlap_for(400) == 50
    assert overlap_for(4000) == 128


def _finish(work: Work, engine: FakeEngine, requests, completion_tokens=4):
    nxt = []
    for request in requests:
        finished = Finished(
            request.request_id,
            "word " * completion_tokens,
            len(request.prompt_ids),
            completion_tokens,
            0,
            "stop",
        )
        nxt.extend(work.finish(finished))
    return nxt


def test_every_part_prompt_fits_the_context_and_the_parts_are_combined():
    engine = FakeEngine(max_model_len=100)
    ids = itertools.count()
    work = Work("k", SummarySpec("summarize", 20), engine, lambda: str(next(ids)))
    requests = work.start(" ".join(f"w{i}" for i in range(500)))

    assert len(requests) == work.parts > 5
    assert all(len(r.prompt_ids) + 20 <= 100 for r in requests)
    issued = list(requests)
    while requests:
        requests = _finish(work, engine, requests)
        assert all(len(r.prompt_ids) + 20 <= 100 for r in requests)
        issued.extend(requests)
    assert work.done
    assert work.level >= 1
    assert len(issued) > work.parts  # at least one combining request
    assert work.completion_tokens == 4 * len(issued)
    assert work.prompt_tokens == sum(len(r.prompt_ids) for r in issued)


def test_combining_that_never_shrinks_stops_after_the_bound():
    engine = FakeEngine(max_model_len=160)
    ids = itertools.count()
    work = Work("k", SummarySpec("summarize", 20), engine, lambda: str(next(ids)))
    requests = work.start(" ".join(f"w{i}" for i in range(500)))
    with pytest.raises(DocumentTooLong, match=f"after {MAX_LEVELS} rounds"):
        while requests:  # summaries as long as the limit allows: the text never gets shorter
            requests = _finish(work, engine, requests, completion_tokens=70)


def test_an_instruction_that_leaves_no_room_for_text_is_refused_with_the_fix():
    engine = FakeEngine(max_model_len=60)
    work = Work("k", SummarySpec("word " * 40, 20), engine, lambda: "1")
    with pytest.raises(DocumentTooLong, match="lower SUMMARIZE_MAX_TOKENS"):
        work.start("some text " * 50)


def _json_finished(request, text: str, reason: str) -> Finished:
    return Finished(request.request_id, text, len(request.prompt_ids), 7, 0, reason)


def test_json_cut_before_it_closes_is_generated_again_with_twice_the_room():
    engine = FakeEngine(max_model_len=100)
    work = Work("k", SummarySpec("summarize", 20, None, '{"type": "object"}'), engine, lambda: "r")
    (first,) = work.start("a short text")

    (again,) = work.finish(_json_finished(first, '{"key_points": ["The council me', "length"))
    done = work.finish(_json_finished(again, '{"key_points": ["The council met."]}', "stop"))

    assert (again.prompt_ids, again.spec.max_tokens, again.loop_breaking) == (
        first.prompt_ids,
        40,
        False,
    )
    assert done == [] and work.result.text == '{"key_points": ["The council met."]}'
    assert work.completion_tokens == 14


@pytest.mark.parametrize(
    ("text", "reason", "room"),
    [
        ('{"key_points": ["The council met."]}', "length", 100),  # cut, but whole: kept
        ('{"key_points": ["The council me', "stop", 100),  # not cut: not the length's fault
        ('{"key_points": ["The council me', "length", 27),  # no more room: 7 + 20 fill 27
    ],
)
def test_json_is_generated_again_only_when_cut_open_and_there_is_room(text, reason, room):
    engine = FakeEngine(max_model_len=room)
    work = Work("k", SummarySpec("summarize", 20, None, '{"type": "object"}'), engine, lambda: "r")
    (first,) = work.start("a short text")

    assert work.finish(_json_finished(first, text, reason)) == []
    assert work.result.text == text


def test_json_cut_open_twice_is_kept_as_it_came():
    engine = FakeEngine(max_model_len=200)
    work = Work("k", SummarySpec("summarize", 20, None, '{"type": "object"}'), engine, lambda: "r")
    (first,) = work.start("a short text")
    (again,) = work.finish(_json_finished(first, '{"a": "b', "length"))

    assert work.finish(_json_finished(again, '{"a": "bbbb', "length")) == []
    assert work.result.text == '{"a": "bbbb'


def _said(request, text: str, reason: str = "stop") -> Finished:
    return Finished(request.request_id, text, len(request.prompt_ids), 9, 0, reason)


def test_a_headline_of_a_titled_document_is_generated_again_without_the_title_line():
    engine = FakeEngine(max_model_len=200)
    work = Work("k", SummarySpec("summarize", 20), engine, lambda: "r")
    (first,) = work.start("Title: Library extends hours\n\nThe library opens later now.")

    (again,) = work.finish(_said(first, "Library Extends Hours: A Trial"))
    work.finish(_said(again, "The library opens later."))

    assert engine.text_of(again.prompt_ids) == "summarize The library opens later now."
    assert work.result.text == "The library opens later."
    assert work.completion_tokens == 18


@pytest.mark.parametrize(
    ("body", "summary", "reason"),
    [
        ("The library opens later now.", "Library Extends Hours", "stop"),  # no title line
        ("Title: Library\n\nIt opens later.", "The library opens later.", "stop"),  # a sentence
        ("Title: Library\n\nIt opens later.", "The library opens later and", "length"),  # cut
    ],
)
def test_a_summary_is_kept_unless_it_is_a_headline_of_a_titled_document(body, summary, reason):
    engine = FakeEngine(max_model_len=200)
    work = Work("k", SummarySpec("summarize", 20), engine, lambda: "r")
    (first,) = work.start(body)

    assert work.finish(_said(first, summary, reason)) == []
    assert work.result.text == summary


def _text_finished(request, text: str) -> Finished:
    return Finished(request.request_id, text, len(request.prompt_ids), 9, 0, "stop")


def _combining(engine: FakeEngine, work: Work, parts, said: list[str]):
    (request,) = [
        r for p, text in zip(parts, said, strict=True) for r in work.finish(_text_finished(p, text))
    ]
    return engine.text_of(request.prompt_ids[1:]).split()


def test_the_opening_as_written_and_the_other_parts_summaries_are_summarized_as_one_text():
    engine = FakeEngine(max_model_len=100)
    ids = itertools.count()
    work = Work("k", SummarySpec("summarize briefly", 20), engine, lambda: str(next(ids)))
    parts = work.start("Title: Bridges\n" + " ".join(f"w{i}" for i in range(120)))
    said = [f"Part {i} says bridge{i} closes." for i in range(len(parts))]

    words = _combining(engine, work, parts, said)

    others = " ".join(said[1:]).split()
    assert len(parts) > 1
    assert words[:4] == ["summarize", "briefly", "Title:", "Bridges"]  # the instruction, as is
    assert words[4:6] == ["w0", "w1"] and words[-len(others) :] == others
    assert "Part 0" not in " ".join(words)  # the first part is read as written instead
    assert len(engine.prompt_ids("summarize briefly", " ".join(words[2:]))) + 20 <= 100


def test_when_little_of_the_opening_fits_every_part_summary_follows_the_title():
    engine = FakeEngine(max_model_len=100)
    ids = itertools.count()
    work = Work("k", SummarySpec("summarize briefly", 20), engine, lambda: str(next(ids)))
    parts = work.start("Title: Bridges\n" + " ".join(f"w{i}" for i in range(250)))
    said = [f"Part {i} says a long thing about bridge{i} and much more." for i in range(len(parts))]

    words = _combining(engine, work, parts, said)

    assert len(parts) == 5
    assert words == ["summarize", "briefly", "Title:", "Bridges", *" ".join(said).split()]


def test_a_final_summary_that_says_a_sentence_twice_keeps_what_it_said_before():
    engine = FakeEngine(max_model_len=100)
    work = Work("k", SummarySpec("summarize", 20), engine, lambda: "r")
    (first,) = work.start("The council shut the bridge for repairs. It opens in May.")
    twice = "The council shut the bridge. It opens in May. The council shut the bridge. The"

    assert work.finish(_text_finished(first, twice)) == []  # no second try

    assert work.result.text == "The council shut the bridge. It opens in May."
    assert not work.regenerated


def test_a_final_summary_with_nothing_usable_before_its_repeats_is_generated_again():
    engine = FakeEngine(max_model_len=100)
    work = Work("k", SummarySpec("summarize", 20), engine, lambda: "r")
    (first,) = work.start("The council shut the bridge for repairs.")
    looping = "the bridge and the council and the road and " * 3  # within one sentence

    (again,) = work.finish(_text_finished(first, looping))

    assert again.loop_breaking and again.prompt_ids == first.prompt_ids
    twice = "The council shut the bridge. The council shut the bridge."
    assert work.finish(_text_finished(again, twice)) == []  # once only; the repeat is dropped
    assert work.result.text == "The council shut the bridge."


def test_a_final_summary_that_copies_the_instruction_is_generated_again_to_break_it():
    engine = FakeEngine(max_model_len=100)
    instruction = "Summarize the document below in two or three sentences."
    work = Work("k", SummarySpec(instruction, 20), engine, lambda: "r")
    (first,) = work.start("The council shut the bridge for repairs.")

    (again,) = work.finish(
        _text_finished(first, "The text is summarized in two or three sentences.")
    )

    assert again.loop_breaking
    assert work.finish(_text_finished(again, "The council shut the bridge.")) == []
    assert work.result.text == "The council shut the bridge."


def test_a_kept_summarys_signals_are_worked_out_once_and_a_mended_ones_for_its_new_text(
    monkeypatch,
):
    import worker.parts

    seen = []
    real = worker.parts.signals
    monkeypatch.setattr(
        worker.parts, "signals", lambda text, *a, **k: seen.append(text) or real(text, *a, **k)
    )
    body = "The council shut the bridge for repairs. It opens in May."
    engine = FakeEngine(max_model_len=100)
    kept, mended = (Work(k, SummarySpec("summarize", 20), engine, lambda: "r") for k in "km")
    twice = "The council shut the bridge. It opens in May. The council shut the bridge."

    kept.finish(_text_finished(kept.start(body)[0], "The council shut the bridge."))
    mended.finish(_text_finished(mended.start(body)[0], twice))

    assert kept.signals(body).flaw is None and mended.signals(body).flaw is None
    assert kept.signals(body) is kept.signals(body)
    assert seen == ["The council shut the bridge.", twice, mended.result.text]
    assert mended.result.text == "The council shut the bridge. It opens in May."


def test_only_a_final_summarys_first_try_ends_as_soon_as_it_loops():
    engine = FakeEngine(max_model_len=100)
    ids = itertools.count()
    work = Work("k", SummarySpec("summarize", 20), engine, lambda: str(next(ids)))
    requests = work.start(" ".join(f"w{i}" for i in range(500)))
    assert not any(r.watch_loops for r in requests)  # parts: their loops are not tried again
    while len(requests) > 1:
        requests = _finish(work, engine, requests)
    (final,) = requests
    assert final.watch_loops

    (again,) = work.finish(_text_finished(final, "the bridge shut and the road shut and " * 3))

    assert again.loop_breaking and not again.watch_loops
    assert not Work("j", SummarySpec("s", 20, None, "{}"), engine, str).start("text")[0].watch_loops
