"""Markdown made plain text before it reaches the prompt.

A small model copies what looks like a document's source: given `# Title` it writes the
heading and the paragraphs under it back, word for word. So a `.md` file is summarized
from its text: a heading becomes a line of its own (the first one, the document's title,
says so: `Title: …`), emphasis and code marks go, a link keeps its words and drops its
address, an image keeps its description, quotes and rules lose their marks, and HTML
tags are taken out (a `<script>` or `<style>` with what is inside it). List items and
table cells stay on their lines. The text inside code blocks is kept as it is.

Every step runs in time linear in its input, whatever the input holds: a mark that opens
and never closes (`**`, `<!--`, `[`) is looked for once, not again from every later
opener, so a hostile file costs what a plain one of its size does.
"""

from __future__ import annotations

import re
from collections.abc import Callable

MARKDOWN_SUFFIXES = (".md", ".markdown")

_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_ATX = re.compile(r"^\s{0,3}(#{1,6})\s+(.*)$")
_SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
_RULE = re.compile(r"^\s{0,3}([-*_])(?:\s*\1){2,}\s*$")
_QUOTE = re.compile(r"^\s{0,3}(?:>\s?)+")
_TABLE_CELL = re.compile(r":?-+:?")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+\S+.*$")
_HIDDEN = re.compile(r"<(script|style)\b", re.I)  # then the rest of the tag, to its `>`
_CLOSERS = {
    "script": re.compile(r"</script\s*>", re.I),
    "style": re.compile(r"</style\s*>", re.I),
}
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>")
_AUTOLINK = re.compile(r"<(?:https?|mailto):")
_CODE = re.compile(r"(?<!`)`+([^`]+)`+")
# Emphasis marks that flank words: **strong**, __strong__, *em*, _em_ (not snake_case, not
# 2*3), and ~~struck~~: an opener, and the closer of the same mark that ends the span.
_STRONG = re.compile(r"(?<![\w*])(\*\*|__)(?=\S)")
_EMPHASIS = re.compile(r"(?<![\w*])([*_])(?=\S)")
_STRIKE = re.compile(r"(~~)(?=\S)")
_FLANKED_CLOSER = r"(?<=\S){}(?![\w*])"
_CLOSER = {
    mark: re.compile(_FLANKED_CLOSER.format(re.escape(mark))) for mark in ("**", "__", "*", "_")
} | {"~~": re.compile(r"(?<=\S)~~")}
_ENTITIES = {"&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&#39;": "'", "&nbsp;": " "}


def is_markdown(path: str) -> bool:
    return path.lower().endswith(MARKDOWN_SUFFIXES)


def plain(markdown: str) -> str:
    """The text a reader of the rendered page sees, line by line."""
    markdown = _without_comments(_without_hidden(markdown))
    lines: list[str] = []
    fenced = None
    titled = False
    for line in markdown.split("\n"):
        fence = _FENCE.match(line)
        if fenced:
            if fence and fence.group(1) == fenced:
                fenced = None
            else:
                lines.append(line)
            continue
        if fence:
            fenced = fence.group(1)
            continue
        if _RULE.match(line) or _is_table_rule(line) or _REFERENCE.match(line):
            if _SETEXT.match(line) and lines and lines[-1].strip():
                titled = _heading(lines, lines.pop(), titled)
            continue
        if _SETEXT.match(line) and lines and lines[-1].strip():
            titled = _heading(lines, lines.pop(), titled)
            continue
        atx = _ATX.match(line)
        if atx:
            titled = _heading(lines, _inline(_unclosed(atx.group(2))), titled)
            continue
        lines.append(_inline(_QUOTE.sub("", line)).rstrip())
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _unclosed(heading: str) -> str:
    """An ATX heading's text without its closing hashes (`## Two ##`), which must follow a
    space."""
    bare = heading.rstrip()
    text = bare.rstrip("#")
    return text if text != bare and text[-1:].isspace() else heading


def _is_table_rule(line: str) -> bool:
    """A table's header rule: `|---|:-:|`, cells of dashes with optional colons."""
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") else line
    return all(_TABLE_CELL.fullmatch(cell.strip()) for cell in line.split("|"))


def _heading(lines: list[str], text: str, titled: bool) -> bool:
    """Add a heading as a line of its own, set apart; the first is the title."""
    text = _inline(text).strip()
    if not text:
        return titled
    if lines and lines[-1].strip():
        lines.append("")
    lines.append(text if titled else f"Title: {text}")
    lines.append("")
    return True


def _inline(text: str) -> str:
    text = _TAG.sub("", _autolinks(text))
    text = _bracketed(text, "![", _image)
    text = _bracketed(text, "[", _link)
    text = _CODE.sub(r"\1", text)
    text = _unwrapped(text, _STRIKE)
    text = _unwrapped(text, _STRONG)
    text = _unwrapped(text, _EMPHASIS)
    for entity, char in _ENTITIES.items():
        text = text.replace(entity, char)
    return text


class _Next:
    """Where a pattern next matches at or after a position, for positions that only grow:
    each stretch of the text is searched once, however many times it is asked about."""

    def __init__(self, text: str, pattern: re.Pattern | str):
        self.text = text
        self.find = pattern.search if isinstance(pattern, re.Pattern) else None
        self.needle = pattern if isinstance(pattern, str) else ""
        self.asked: int | None = None  # where the last search began
        self.found = -1  # and where it matched (-1: nowhere after)

    def at(self, start: int) -> int:
        """The first index >= start where it matches, or -1."""
        if self.asked is not None and self.asked <= start and not -1 < self.found < start:
            return self.found
        if self.find is not None:
            match = self.find(self.text, start)
            self.found = match.start() if match else -1
        else:
            self.found = self.text.find(self.needle, start)
        self.asked = start
        return self.found


def _without_hidden(text: str) -> str:
    """Without `<script>…</script>` and `<style>…</style>`, tags and content; one that never
    closes stays, its tag taken out later as any tag is."""
    kept, done = [], 0
    gt = _Next(text, ">")
    closers = {name: _Next(text, pattern) for name, pattern in _CLOSERS.items()}
    never = set()
    position = 0
    while match := _HIDDEN.search(text, position):
        position = match.start() + 1
        name = match.group(1).lower()
        if name in never:
            continue
        end_of_tag = gt.at(match.end())
        if end_of_tag == -1:
            break  # no `>` after here: no opener can end
        closer = closers[name].at(end_of_tag + 1)
        if closer == -1:
            never.add(name)  # no later opener of this kind can close either
            continue
        kept.append(text[done : match.start()])
        position = done = _CLOSERS[name].match(text, closer).end()
    return "".join(kept) + text[done:] if kept else text


def _without_comments(text: str) -> str:
    """Without `<!-- … -->`; an unclosed comment stays."""
    kept, done = [], 0
    while (start := text.find("<!--", done)) != -1:
        end = text.find("-->", start + 4)
        if end == -1:
            break
        kept.append(text[done:start])
        done = end + 3
    return "".join(kept) + text[done:] if kept else text


def _autolinks(text: str) -> str:
    """`<https://x.org>` as its address."""
    kept, done = [], 0
    ends = _Next(text, re.compile(r"[>\s]"))
    for match in _AUTOLINK.finditer(text):
        if match.start() < done:
            continue
        end = ends.at(match.end())
        if end > match.end() and text[end] == ">":
            kept.append(text[done : match.start()] + text[match.start() + 1 : end])
            done = end + 1
    return "".join(kept) + text[done:] if kept else text


# A bracketed span at `start` (its words begin at `inner`): where it ends and what it
# becomes, or None when it is no such span. `ahead(role, char, start)` finds a character
# ahead in the text, each role's searches starting ever later.
_Span = Callable[[str, int, int, Callable[[str, str, int], int]], "tuple[int, str] | None"]


def _bracketed(text: str, opener: str, span: _Span) -> str:
    """Each `opener` that begins a span (an image, a link) replaced by its words, leftmost
    first, as re.sub would; the searches for closing brackets never go over a stretch twice."""
    if opener not in text:
        return text
    searches: dict[str, _Next] = {}

    def ahead(role: str, char: str, start: int) -> int:
        return searches.setdefault(role, _Next(text, char)).at(start)

    kept, done = [], 0
    start = text.find(opener)
    while start != -1:
        found = span(text, start, start + len(opener), ahead)
        if found is None:
            start = text.find(opener, start + 1)
            continue
        end, words = found
        kept.append(text[done:start] + words)
        done = end
        start = text.find(opener, end)
    return "".join(kept) + text[done:] if kept else text


def _image(text: str, start: int, inner: int, ahead) -> tuple[int, str] | None:
    """`![words](address)`."""
    close = ahead("words", "]", inner)
    if close == -1 or text[close + 1 : close + 2] != "(":
        return None
    end = ahead("address", ")", close + 2)
    return None if end == -1 else (end + 1, text[inner:close])


def _link(text: str, start: int, inner: int, ahead) -> tuple[int, str] | None:
    """`[words](address)` or `[words][reference]`."""
    close = ahead("words", "]", inner)
    if close <= inner:
        return None
    after = text[close + 1 : close + 2]
    if after == "(":
        end = ahead("address", ")", close + 2)
    elif after == "[":
        end = ahead("reference", "]", close + 2)
    else:
        return None
    return None if end == -1 else (end + 1, text[inner:close])


def _unwrapped(text: str, opener: re.Pattern) -> str:
    """Spans between a mark that opens (`opener`) and the first closer of the same mark
    after it, replaced by what is between; leftmost first, as re.sub would. A mark whose
    closer is found nowhere after one opener is not looked for again."""
    closers = {}
    kept, done = [], 0
    position = 0
    while match := opener.search(text, position):
        mark = match.group(1)
        if mark not in closers:
            closers[mark] = _Next(text, _CLOSER[mark])
        close = closers[mark].at(match.end() + 1)
        if close == -1:
            position = match.start() + 1
            continue
        kept.append(text[done : match.start()] + text[match.end() : close])
        position = done = close + len(mark)
    return "".join(kept) + text[done:] if kept else text
