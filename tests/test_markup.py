"""Markdown is summarized from its text: what a reader of the rendered page sees."""

from __future__ import annotations

import hashlib

import pytest

from jobs import corpus
from jobs.markup import plain
from tests.helpers import write


@pytest.mark.parametrize(
    ("markdown", "text"),
    [
        ("# Bridge closes\n\nThe bridge closes.", "Title: Bridge closes\n\nThe bridge closes."),
        (
            "Bridge closes\n=============\nThe bridge closes.",
            "Title: Bridge closes\n\nThe bridge closes.",
        ),
        ("# One\ntext\n## Two ##\nmore", "Title: One\n\ntext\n\nTwo\n\nmore"),
        ("**Strong**, __strong__, *em*, _em_ and ~~gone~~.", "Strong, strong, em, em and gone."),
        ("snake_case_name, 2*3*4 and a * star", "snake_case_name, 2*3*4 and a * star"),
        (
            "See [the report](https://x.org/r.pdf) and [this][1].\n\n[1]: https://x.org",
            "See the report and this.",
        ),
        (
            "![A map of the route](map.png) and <https://x.org>",
            "A map of the route and https://x.org",
        ),
        ("Run `make test` now.", "Run make test now."),
        ("> A quote\n> on two lines", "A quote\non two lines"),
        ("- one\n- two\n1. three", "- one\n- two\n1. three"),
        ("above\n\n---\n\nbelow\n\n* * *", "above\n\nbelow"),
        ("| a | b |\n|---|:-:|\n| 1 | 2 |", "| a | b |\n| 1 | 2 |"),
        ("```\n# a comment, not a heading\n**kept**\n```", "# a comment, not a heading\n**kept**"),
        ("A <b>bold</b> <span class='x'>word</span>.<br/>", "A bold word."),
        ("<script>steal()</script><style>p {}</style>Text<!-- hidden -->", "Text"),
        ("Fish &amp; chips &lt;3", "Fish & chips <3"),
    ],
)
def test_markdown_becomes_the_text_a_reader_sees(markdown, text):
    assert plain(markdown) == text


def test_a_markdown_file_is_read_as_its_text_and_hashed_as_it(tmp_path):
    path = write(
        tmp_path, "note.md", "# Bridge closes\r\n\r\nThe **bridge** closes [today](x).\r\n"
    )

    read = corpus.read(str(path), max_bytes=10_000)

    assert read.body == "Title: Bridge closes\n\nThe bridge closes today."
    assert read.content_hash == hashlib.sha256(read.body.encode()).hexdigest()
    assert read.size_bytes == len(read.body.encode())


def test_a_text_file_keeps_its_marks_and_markdown_of_nothing_is_empty(tmp_path):
    text = write(tmp_path, "plain.txt", "# not markdown here *really*")
    empty = write(tmp_path, "empty.md", "<!-- nothing -->\n\n---\n")

    assert corpus.read(str(text), max_bytes=10_000).body == "# not markdown here *really*"
    assert corpus.read(str(empty), max_bytes=10_000).reason == "empty file: nothing to summarize"


MEGABYTE = 1_000_000


@pytest.mark.timeout(30)  # each takes well under a second; a pattern that backtracks, hours
@pytest.mark.parametrize(
    "hostile",
    [
        " " * MEGABYTE + "x",  # a run of spaces (table rules, headings)
        "# a" + " " * MEGABYTE + "b",  # a heading's text before its closing hashes
        "**a " * (MEGABYTE // 4),  # strong that never closes
        "*a " * (MEGABYTE // 3),  # emphasis that never closes
        "_a " * (MEGABYTE // 3),
        "~~a " * (MEGABYTE // 4),  # struck that never closes
        "<!--" * (MEGABYTE // 4),  # comments that never close
        "<script>" * (MEGABYTE // 8),  # scripts that never close
        "<script " * (MEGABYTE // 8),  # nor does their tag
        "[" * MEGABYTE,  # links that never close
        "[" * (MEGABYTE // 2) + "a][" + "x" * (MEGABYTE // 2),
        "![" * (MEGABYTE // 2),  # images that never close
        "[a](" * (MEGABYTE // 4),  # addresses that never close
        "<http:" * (MEGABYTE // 6),  # autolinks that never close
        "`" * MEGABYTE,  # code marks
        "- " * (MEGABYTE // 2) + "x",  # almost a rule
        "|-" * (MEGABYTE // 2) + "x",  # almost a table rule
    ],
    ids=lambda text: repr(text[:12]),
)
def test_a_hostile_megabyte_is_made_plain_in_linear_time(hostile):
    assert isinstance(plain(hostile), str)


def test_marks_that_do_not_close_stay_as_they_were():
    assert plain("a **b and <!-- c and [d and ~~e") == "a **b and <!-- c and [d and ~~e"
    assert plain("x <script>y and z") == "x y and z"  # the tag goes, its unclosed text stays
