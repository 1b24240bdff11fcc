"""Reading one document file's text: a text or Markdown file here, a web page, PDF or Word
file by an extraction process (jobs/extraction.py) or, for tests and `summarize eval`,
here; or saying plainly why it cannot be summarized."""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from core.storage import is_url
from jobs import folders, formats, objects
from jobs.documents import Text, Unreadable
from jobs.folders import Found, shown, stat_problem
from jobs.markup import is_markdown, plain


def found_in(
    paths: Iterable[str], follow_links: bool = False, storage_options: dict | None = None
) -> Iterator[Found]:
    """Every file under the paths given, in their order: local files and folders (a file://
    URL is one) walked by jobs/folders.py, other URLs listed by jobs/objects.py."""
    given = (_local(str(path)) for path in paths)
    for remote, group in itertools.groupby(given, key=is_url):
        if not remote:
            yield from folders.walk(group, follow_links)
            continue
        for url in group:
            yield from objects.walk(url, storage_options or {})


def _local(path: str) -> str:
    """A file:// URL as the local path it names; any other path as given."""
    if path[:7].lower() != "file://":
        return path
    parts = urlsplit(path)
    return unquote(parts.path) if parts.netloc in ("", "localhost") else path


@dataclass
class Container:
    """A web page, PDF or Word file, open and within its size limit, whose text is still to
    be taken out: `submit` has it done in a process of its own (jobs/extraction.py)."""

    path: str
    kind: str  # formats.kind
    handle: BinaryIO
    limit: int  # the file's size limit
    max_bytes: int  # its text's

    def text(self, extracted: str) -> Text | Unreadable:
        """The document, from the text taken out of the file."""
        return _text(self.path, extracted.replace("\r\n", "\n").replace("\x00", ""), self.max_bytes)

    def here(self) -> Text | Unreadable:
        """Its text taken out in this process, with no time or memory limit: for files
        summarized already (`summarize eval` reads them again) and tests."""
        with self.handle:
            raw = self.handle.read(self.limit + 1)
        if len(raw) > self.limit:
            return Unreadable(self.path, formats.too_large(None, self.limit, self.kind))
        try:
            return self.text(formats.text_of(self.kind, raw, self.max_bytes))
        except formats.NoText as exc:
            return Unreadable(self.path, str(exc))


def load(found: Found, max_bytes: int) -> Text | Unreadable | Container:
    """One document file opened and weighed: a text or Markdown file is read (its Text); a
    page, PDF or Word file is left open for its text to be taken out (a Container); or why
    it cannot be summarized."""
    if found.problem:  # refused before reading: a link that leaves the folder given
        return Unreadable(shown(found.path), found.problem)
    if reason := formats.refused(found.path):
        return Unreadable(shown(found.path), reason)
    path = found.path
    kind = formats.kind(path)
    limit = formats.limit(path, max_bytes)
    if found.size is not None and found.size > limit:  # an object: refused before it is fetched
        return Unreadable(path, formats.too_large(found.size, limit, kind))
    handle = found.open()
    if isinstance(handle, Unreadable):
        return handle
    try:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            handle.close()
            return Unreadable(path, formats.too_large(size, limit, kind))
        if kind is not None:
            return Container(path, kind, handle, limit, max_bytes)
        with handle:
            raw = handle.read(limit + 1)
    except OSError as exc:
        handle.close()
        return Unreadable(path, f"cannot be read ({stat_problem(exc)})")
    if len(raw) > limit:
        return Unreadable(path, formats.too_large(None, limit, kind))
    if b"\x00" in raw:
        return Unreadable(path, "binary file (it contains NUL bytes): only text is summarized")
    try:
        body = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return Unreadable(
            path,
            f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}): "
            "convert it to UTF-8",
        )
    body = body.replace("\r\n", "\n")
    if is_markdown(path):  # summarized from its text, not its markup (jobs/markup.py)
        body = plain(body)
    return _text(path, body, max_bytes)


def read(path: str, max_bytes: int, target: str | None = None) -> Text | Unreadable:
    """Read one file's text (UTF-8 text, Markdown, a web page, a PDF or a Word file) in this
    process, or say plainly why it cannot be summarized (`open_regular` says how it is
    opened). `submit` reads through `load` and jobs/extraction.py instead."""
    loaded = load(Found(path, "document", target=target), max_bytes)
    return loaded.here() if isinstance(loaded, Container) else loaded


def _text(path: str, body: str, max_bytes: int) -> Text | Unreadable:
    if not body.strip():
        return Unreadable(path, "empty file: nothing to summarize")
    encoded = body.encode("utf-8")
    if len(encoded) > max_bytes:  # text taken out of a PDF or Word file
        return Unreadable(path, formats.too_large(len(encoded), max_bytes, "text"))
    return Text(path, body, hashlib.sha256(encoded).hexdigest(), len(encoded))
