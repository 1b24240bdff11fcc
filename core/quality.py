"""Quality signals of a summary, computed from its text and its document's, without a model.

Each is cheap (a pass over the summary's words, and a search of the document's text
per word), so the worker computes them for every row as it is written:

- `repetition`: the share of the summary's 4-word runs that occur in it before
  (0: none repeats; a summary that says the same thing four times nears 0.75);
- `copied`: the longest run of words copied word for word from the document,
  over the summary's length in words (1: the summary is a quote);
- `novel_numbers`: numbers in the summary that the document does not contain
  (a cheap hint of invention);
- `looped`: the summary repeats itself: a sentence, or any 8-word run, three
  times or more;
- `flaw`: why the summary is not usable as it stands, the first of: `unparsed` (a JSON
  summary that does not parse), `headline` (one short line that ends no sentence),
  `leaked` (5 words or more of the instruction, in a run the document does not have),
  `repeated` (a sentence said twice, word for word or nearly); None when none applies.

Words are compared in lower case, without punctuation; numbers without their
thousands separators ("1,200" is "1200").
"""

from __future__ import annotations

import json as jsonlib
import re
import string
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

REPEATED_RUN_WORDS = 4  # the run whose repeats `repetition` counts
LOOP_RUN_WORDS = 8  # an 8-word run three times is a loop
LOOP_TIMES = 3

# Punctuation to spaces, for `_plain` (str.translate: a third of the cost of a regex's split)
NOT_IN_WORDS = str.maketrans(dict.fromkeys(string.punctuation.replace("_", "") + "“”‘’«»–—…·", " "))
# The comma of 1,200 (not of 12,13). The comma comes first and the digit before it is looked
# back at after, so the search runs from comma to comma (30 times faster on a page of text)
THOUSANDS = re.compile(r",(?<=\d,)(?=\d{3}(?!\d))")
NUMBER = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*")
# Words, and what ends a sentence (a stop, and the quote or bracket that closes on it). A run
# of stops is tried from its first stop only: a long run that ends inside a word is one
# failed try, not one a stop (which made a page of dots take seconds).
TOKEN = re.compile(r"\w+|(?<![.!?])[.!?]+[\"'”’)\]]*(?=\s|$)|\n")


LEAK_RUN_WORDS = 5  # a run this long of the instruction's words, not the document's, leaked
NEAR_SAME = 0.6  # two sentences sharing this share of the shorter's word pairs say one thing
NEAR_SAME_WORDS = 6  # ... when both have at least this many words
COMPARED_SENTENCES = 64  # sentences compared pair by pair (a summary longer loops anyway)


@dataclass(frozen=True)
class Signals:
    repetition: float
    copied: float
    novel_numbers: int
    looped: bool
    flaw: str | None = None


def signals(summary: str, document: str, instruction: str = "", json: bool = False) -> Signals:
    """The signals of a summary of `document`, written under `instruction` (a JSON summary
    when `json`: a --schema batch's)."""
    said, sentences = _read(summary)
    return Signals(
        repetition=repetition(said),
        copied=copied(summary, document),
        novel_numbers=len(novel_numbers(summary, document)),
        looped=_loops(said, sentences),
        flaw=_flaw(summary, document, instruction, json, sentences),
    )


def flaw(summary: str, document: str, instruction: str = "", json: bool = False) -> str | None:
    """Why the summary is not usable as it stands (see the module's docstring), or None."""
    return _flaw(summary, document, instruction, json, _read(summary)[1])


def usable(summary: str, document: str, instruction: str = "") -> bool:
    """Whether a (text) summary says something, does not loop and has no flaw."""
    return bool(summary) and not loops(summary) and flaw(summary, document, instruction) is None


def _flaw(
    summary: str, document: str, instruction: str, json: bool, sentences: list[str]
) -> str | None:
    if json:
        return None if parses(summary) else "unparsed"
    if title_only(summary):
        return "headline"
    if leaked(summary, instruction, document):
        return "leaked"
    if repeats(sentences):
        return "repeated"
    return None


def parses(text: str) -> bool:
    """Whether a JSON summary is whole: it parses."""
    try:
        jsonlib.loads(text)
    except ValueError:
        return False
    return True


def leaked(summary: str, instruction: str, document: str) -> bool:
    """Whether the summary copies LEAK_RUN_WORDS words or more of the instruction in a run
    that the document does not have ("The document is summarized in two or three
    sentences")."""
    told = _runs(instruction)
    if not told:
        return False
    said = _plain(summary).split()
    text = None
    for start in range(len(said) - LEAK_RUN_WORDS + 1):
        run = tuple(said[start : start + LEAK_RUN_WORDS])
        if run in told:
            text = _plain(document) if text is None else text
            if f" {' '.join(run)} " not in text:
                return True
    return False


# A sentence as written: up to its stop (and the quote or bracket closing on it) or line end,
# with the space after it
SENTENCE = re.compile(r"[^.!?\n]*(?:[.!?]+[\"'”’)\]]*|\n|$)\s*")


def without_repeats(summary: str) -> str:
    """The summary without each sentence that says again what an earlier one said (as
    `repeats` finds them), nor a last sentence cut before its end that starts as an earlier
    one does (a repeat the length or the loop watch ended), the rest as written."""
    kept: list[str] = []
    seen: list[tuple[str, set]] = []
    for match in SENTENCE.finditer(summary):
        written = match.group()
        if not written:
            continue
        words = _read(written)[0]
        pairs = set(zip(words, words[1:], strict=False))
        said = " ".join(words)
        cut = match.end() == len(summary) and written.rstrip()[-1:] not in ".!?\"'”’)]"
        again = (len(words) >= 3 or cut) and any(
            said == other
            or (cut and words and other.startswith(said + " "))
            or (
                len(words) >= NEAR_SAME_WORDS
                and len(earlier) >= NEAR_SAME_WORDS - 1
                and len(pairs & earlier) >= NEAR_SAME * min(len(pairs), len(earlier))
            )
            for other, earlier in seen
        )
        if not again:
            kept.append(written)
            seen.append((said, pairs))
    return "".join(kept).strip()


@lru_cache(maxsize=64)
def _runs(instruction: str) -> frozenset[tuple[str, ...]]:
    """The instruction's runs of LEAK_RUN_WORDS words (a batch's every summary asks)."""
    words = _plain(instruction).split()
    n = LEAK_RUN_WORDS
    return frozenset(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def repeats(sentences: list[str]) -> bool:
    """Whether a sentence of 3 words or more is said twice, or two sentences of
    NEAR_SAME_WORDS or more share NEAR_SAME of the shorter's word pairs (the same claim
    with a word changed: "The document includes a detailed explanation of the terms")."""
    counted = Counter(s for s in sentences if s.count(" ") >= 2)
    if counted and max(counted.values()) >= 2:
        return True
    pairs = [
        set(zip(words, words[1:], strict=False))
        for words in (s.split() for s in sentences[:COMPARED_SENTENCES])
        if len(words) >= NEAR_SAME_WORDS
    ]
    for i, first in enumerate(pairs):
        for second in pairs[i + 1 :]:
            if len(first & second) >= NEAR_SAME * min(len(first), len(second)):
                return True
    return False


def _read(text: str) -> tuple[list[str], list[str]]:
    """The text's words, and its sentences as their words joined, in one pass."""
    said: list[str] = []
    sentences: list[str] = []
    start = 0
    for token in TOKEN.findall(text.lower()):
        if token[0] in ".!?\n":
            if len(said) > start:
                sentences.append(" ".join(said[start:]))
            start = len(said)
        else:
            said.append(token)
    if len(said) > start:
        sentences.append(" ".join(said[start:]))
    return said, sentences


def sentences(text: str) -> list[list[str]]:
    """The text's sentences, each as its words (lower case, without punctuation), by the rule
    `looped` reads sentences with; a line break ends a sentence too."""
    found: list[list[str]] = []
    sentence: list[str] = []
    for token in TOKEN.findall(text.lower()):
        if token[0] in ".!?\n":
            if sentence:
                found.append(sentence)
            sentence = []
        else:
            sentence.append(token)
    if sentence:
        found.append(sentence)
    return found


def repetition(said: list[str], n: int = REPEATED_RUN_WORDS) -> float:
    """The share of the n-word runs that are repeats of an earlier one."""
    runs = [tuple(said[i : i + n]) for i in range(len(said) - n + 1)]
    if not runs:
        return 0.0
    return (len(runs) - len(set(runs))) / len(runs)


def _plain(text: str) -> str:
    """The text's words in lower case, each between single spaces, for searching runs in."""
    return f" {' '.join(text.lower().translate(NOT_IN_WORDS).split())} "


def copied(summary: str, document: str) -> float:
    """The longest run of the summary's words found word for word in the document, over the
    summary's length. The longest run ending at each word is at most one longer than the one
    ending at the word before, so one search of the document's text per word finds it."""
    said = _plain(summary).split()
    if not said:
        return 0.0
    text = _plain(document)
    longest = 0
    for end in range(len(said)):
        if f" {' '.join(said[end - longest : end + 1])} " in text:
            longest += 1
    return longest / len(said)


def novel_numbers(summary: str, document: str) -> list[str]:
    """Numbers the summary gives that the document does not, in the summary's order."""
    found = NUMBER.findall(summary)
    if not found:
        return []  # most summaries: the document need not be read for numbers
    known = THOUSANDS.sub("", document)
    novel: dict[str, None] = {}
    for number in found:
        plain = THOUSANDS.sub("", number).rstrip(".")
        if plain not in novel and not _holds_number(known, plain):
            novel[plain] = None
    return list(novel)


def _holds_number(text: str, number: str) -> bool:
    """Whether `number` stands in `text` as a whole number: not inside a longer number
    ("5" is not in "5.5" nor "15"), nor after a letter ("3" is not in "MP3")."""
    start = text.find(number)
    while start != -1:
        end = start + len(number)
        before = text[start - 1] if start else " "
        after = text[end : end + 2]
        inside = before.isalnum() or before == "." or after[:1].isdigit()
        if not inside and not (after[:1] == "." and after[1:2].isdigit()):
            return True
        start = text.find(number, start + 1)
    return False


TITLE_WORDS = 20  # one line this short that ends no sentence reads as a headline
ENDS_SENTENCE = re.compile(r"[.!?][\"'”’)\]]*$")


def title_only(summary: str) -> bool:
    """Whether the summary is a headline, not a summary: one short line ending no sentence
    (a document that opens with `Title: …` led the small model to write just a title)."""
    text = summary.strip()
    return (
        bool(text)
        and "\n" not in text
        and len(text.split()) <= TITLE_WORDS
        and not ENDS_SENTENCE.search(text)
    )


def loops(summary: str) -> bool:
    """Whether the summary repeats a sentence, or any 8-word run, three times or more."""
    return _loops(*_read(summary))


def _loops(said: list[str], sentences: list[str]) -> bool:
    counted = Counter(s for s in sentences if s.count(" ") >= 2)  # sentences of 3 words or more
    if counted and max(counted.values()) >= LOOP_TIMES:
        return True
    runs = Counter(
        tuple(said[i : i + LOOP_RUN_WORDS]) for i in range(len(said) - LOOP_RUN_WORDS + 1)
    )
    return bool(runs) and max(runs.values()) >= LOOP_TIMES
