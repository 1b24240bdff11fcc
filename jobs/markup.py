"""Markdown made plain text before it reaches the prompt.

A small model copies what looks like a document's source: given `# Title` it writes the
heading and the paragraphs under it back, word for word. So a `.md` file is summarized
from its text: a heading becomes a line of its own (the first one, the document's title,
says so: `Title: …`), emphasis and code marks go, a link keeps its words and drops its
address, an image keeps its description, quotes and rules lose their marks, and HTML
tags are taken out (a `<script>` or `<style>` with what is inside it). List items and
table cells stay on their lines. The text inside code blocks is kept as it is.
"""

from __future__ import annotations

import re

MARKDOWN_SUFFIXES = (".md", ".markdown")

_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_ATX = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+\s*)?$")
_SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
_RULE = re.compile(r"^\s{0,3}([-*_])(?:\s*\1){2,}\s*$")
_QUOTE = re.compile(r"^\s{0,3}(?:>\s?)+")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+\S+.*$")
_HIDDEN = re.compile(r"<(script|style)\b[^>]*>.*?</\1\s*>", re.I | re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>")
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\](?:\([^)]*\)|\[[^\]]*\])")
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
_CODE = re.compile(r"`+([^`]+)`+")
# Emphasis marks that flank words: **strong**, __strong__, *em*, _em_ (not snake_case, not 2*3)
_STRONG = re.compile(r"(?<![\w*])(\*\*|__)(?=\S)(.+?)(?<=\S)\1(?![\w*])")
_EMPHASIS = re.compile(r"(?<![\w*])([*_])(?=\S)(.+?)(?<=\S)\1(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_ENTITIES = {"&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&#39;": "'", "&nbsp;": " "}


def is_markdown(path: str) -> bool:
    return path.lower().endswith(MARKDOWN_SUFFIXES)


def plain(markdown: str) -> str:
    """The text a reader of the rendered page sees, line by line."""
    markdown = _COMMENT.sub("", _HIDDEN.sub("", markdown))
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
        if _RULE.match(line) or _TABLE_RULE.match(line) or _REFERENCE.match(line):
            if _SETEXT.match(line) and lines and lines[-1].strip():
                titled = _heading(lines, lines.pop(), titled)
            continue
        if _SETEXT.match(line) and lines and lines[-1].strip():
            titled = _heading(lines, lines.pop(), titled)
            continue
        atx = _ATX.match(line)
        if atx:
            titled = _heading(lines, _inline(atx.group(2)), titled)
            continue
        lines.append(_inline(_QUOTE.sub("", line)).rstrip())
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


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
    text = _TAG.sub("", _AUTOLINK.sub(r"\1", text))
    text = _IMAGE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _CODE.sub(r"\1", text)
    text = _STRIKE.sub(r"\1", text)
    text = _STRONG.sub(r"\2", text)
    text = _EMPHASIS.sub(r"\2", text)
    for entity, char in _ENTITIES.items():
        text = text.replace(entity, char)
    return text
