"""Quality signals on hand-made texts whose answers are known."""

from __future__ import annotations

import pytest

from core.quality import copied, flaw, loops, novel_numbers, signals, title_only, without_repeats

ARTICLE = (
    "The council voted on Tuesday to close the river bridge for repairs from 3 March. "
    "Work will cost 1,200,000 dollars and take 14 weeks, the mayor said."
)


def test_a_summary_in_its_own_words_has_no_repeats_no_long_copy_and_no_invented_number():
    found = signals("Councillors shut a bridge for 14 weeks of repair work.", ARTICLE)
    assert found.repetition == 0.0
    assert found.novel_numbers == 0
    assert found.looped is False
    assert found.copied == pytest.approx(2 / 10)  # "14 weeks": two of its ten words


def test_a_sentence_said_three_times_is_a_loop():
    sentence = "This Source Code Form is incompatible with secondary licenses. "
    assert loops(sentence * 3)
    assert not loops(sentence * 2)


def test_an_eight_word_run_said_three_times_inside_longer_sentences_is_a_loop():
    run = "the apache license to distribute and use the work"
    text = f"First, {run} is fine; then {run} again, and {run} once more"
    assert loops(text)
    assert not loops(f"First, {run} is fine; then {run} again")


def test_repetition_is_the_share_of_four_word_runs_seen_before():
    assert signals("a b c d a b c d", "").repetition == pytest.approx(1 / 5)
    assert signals("one two three", "").repetition == 0.0


def test_a_verbatim_quote_is_copied_whole_and_the_longest_run_counts():
    quote = "Work will cost 1,200,000 dollars and take 14 weeks"
    assert copied(quote, ARTICLE) == 1.0
    summary = "The mayor said work will cost a lot."
    # "work will cost" (3 of 8 words), longer than "the mayor said" (3) ties: 3 / 8
    assert copied(summary, ARTICLE) == pytest.approx(3 / 8)
    assert copied("", ARTICLE) == 0.0


def test_a_number_the_document_does_not_hold_is_novel_and_separators_do_not_matter():
    assert novel_numbers("It costs 1200000 dollars from 3 March.", ARTICLE) == []
    assert novel_numbers("It will take 16 weeks and 16 days, said 2 people.", ARTICLE) == [
        "16",
        "2",
    ]


def test_a_number_inside_a_longer_one_is_not_found_in_it():
    assert novel_numbers("16 weeks", "It took 160 days and 2.16 hours.") == ["16"]
    assert novel_numbers("16 weeks", "It took 160 days, then 16 more.") == []


def test_a_number_inside_a_decimal_a_word_or_a_list_is_not_found_in_it():
    assert novel_numbers("5 goals", "It scored 5.5 on the MP5 scale.") == ["5"]
    assert novel_numbers("12 and 1200", "Games 12,13 and 1,200 fans.") == []
    assert novel_numbers("5200 and 3000", "Rooms a,200 and 5, 200; 3,000 at the start.") == ["5200"]


def test_a_quoted_sentence_said_three_times_is_a_loop():
    assert loops('The model says "we win." ' * 3)


@pytest.mark.parametrize(
    "document",
    [
        "यह एक परीक्षण वाक्य है जो हिंदी में लिखा गया है।",
        "这是一个测试，我们在这里写中文。然后继续。",
        "Der Preis beträgt 5 € laut § 12 des Vertrags über café.",
    ],
)
def test_a_summary_quoted_from_its_document_is_copied_whole_in_any_script(document):
    assert signals(document, document).copied == 1.0


@pytest.mark.timeout(30)  # well under a second; the old pattern took hours on a megabyte
@pytest.mark.parametrize("hostile", ["." * 1_000_000 + "x", "?!" * 500_000 + "x"])
def test_a_megabyte_of_stops_inside_a_word_is_read_in_linear_time(hostile):
    assert signals(hostile, "a document").looped is False


@pytest.mark.parametrize(
    ("summary", "headline"),
    [
        ("The Central Library Extension: A One-Year Trial to Improve Student Access", True),
        ("  Central library extends evening hours \n", True),
        ("The library will stay open until 10 p.m. on weekdays.", False),  # a sentence
        ('He said: "We want to see whether the demand holds."', False),
        ("Library hours\nThe library opens later.", False),  # more than one line
        (" ".join(["word"] * 21), False),  # too long for a headline: a cut sentence
        ("", False),
    ],
)
def test_a_headline_is_one_short_line_that_ends_no_sentence(summary, headline):
    assert title_only(summary) is headline


INSTRUCTION = (
    "Summarize the document below in two or three sentences. "
    "State its main facts plainly and add nothing that is not in it."
)


@pytest.mark.parametrize(
    ("summary", "found"),
    [
        ("The council will close the bridge. The council will close the bridge.", "repeated"),
        (  # the same claim with words changed (a licence's summary, real)
            "The document provides a comprehensive and detailed explanation of the terms and "
            "conditions of the license. The document includes a detailed explanation of the "
            "terms and conditions of the agreement.",
            "repeated",
        ),
        (  # the instruction's words, which the article does not have
            "The article is summarized below in two or three sentences. The bridge closes.",
            "leaked",
        ),
        ("The Bridge Closes for Fourteen Weeks", "headline"),
        (
            "The council voted to close the river bridge. The work takes 14 weeks and costs "
            "1.2 million dollars.",
            None,
        ),
        ("The council met. The council met again on Friday to vote.", None),  # two sentences
    ],
)
def test_a_summary_has_the_first_flaw_that_applies(summary, found):
    assert flaw(summary, ARTICLE, INSTRUCTION) == found
    assert signals(summary, ARTICLE, INSTRUCTION).flaw == found


def test_words_of_the_instruction_the_document_has_too_are_not_a_leak():
    document = "Write the summary in two or three sentences, the editor said."
    summary = "The editor asked for the summary in two or three sentences."
    assert flaw(summary, document, INSTRUCTION) is None


@pytest.mark.parametrize(
    ("summary", "found"),
    [
        ('{"headline": "Bridge closes", "key_points": ["It shuts."]}', None),
        ('{"headline": "Bridge closes", "key_points": ["It sh', "unparsed"),
        ('{"headline": "The Bridge"}', None),  # JSON is not read as prose: no headline
    ],
)
def test_a_json_summary_is_flawed_only_when_it_does_not_parse(summary, found):
    assert flaw(summary, ARTICLE, INSTRUCTION, json=True) == found


@pytest.mark.timeout(30)
def test_a_long_hostile_summary_is_compared_pair_by_pair_only_so_far():
    summary = " ".join(f"Sentence {i} is about topic {i} of many here." for i in range(20_000))
    assert flaw(summary, ARTICLE, INSTRUCTION) is None


@pytest.mark.parametrize(
    ("summary", "mended"),
    [
        (
            "The document is about the document. The document is about the document\n\n"
            "It studies bridges.",
            "The document is about the document. It studies bridges.",
        ),
        (  # nearly the same claim, said again (real, from a whole paper's summary)
            "The performance evaluation of LSA is compared to the performance of the PLS model "
            "using Hellinger similarity. The performance evaluation of LAS is compared to the "
            "performance evaluation using Hellinger similarity. The results are in Table 4.",
            "The performance evaluation of LSA is compared to the performance of the PLS model "
            "using Hellinger similarity. The results are in Table 4.",
        ),
        ("The council met. The council met again on Friday to vote.", None),  # nothing again
        (  # a repeat the length cap cut, as it starts
            "The council met on Friday. It voted. The council met",
            "The council met on Friday. It voted.",
        ),
        (  # cut, but not as an earlier sentence starts
            "The council met on Friday to decide the fate of the river bridge. It voted to "
            "close it for fourteen weeks. The mayor",
            None,
        ),
    ],
)
def test_a_sentence_said_again_is_dropped_and_the_rest_kept_as_written(summary, mended):
    assert without_repeats(summary) == (mended or summary)
    assert flaw(without_repeats(summary), ARTICLE) is None
