"""Finding documents under the paths a user gives, and reading each one safely.

Walking streams: nothing here holds more than one file's text at a time, so a
folder of a million files costs no more memory than a folder of ten.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

SUFFIXES = (".txt", ".md")


@dataclass(frozen=True)
class Found:
    """One thing the walk met: a candidate document, a file it skips, or a path it cannot use."""

    path: str
    kind: str  # "document", "skipped" (not .txt/.md) or "problem"
    problem: str | None = None


@dataclass(frozen=True)
class Text:
    """A document read successfully."""

    path: str
    body: str
    content_hash: str
    size_bytes: int


@dataclass(frozen=True)
class Unreadable:
    """A .txt or .md file that cannot become a document, and why, in words a user can act on."""

    path: str
    reason: str


def walk(paths: Iterable[str | os.PathLike]) -> Iterator[Found]:
    """Every file under `paths`, recursively, in a stable order; symlinks followed, loops reported."""
    for given in paths:
        path = os.path.abspath(os.fspath(given))
        try:
            info = os.stat(path)
        except OSError as exc:
            yield Found(path, "problem", _stat_problem(exc))
            continue
        if stat.S_ISDIR(info.st_mode):
            yield from _walk_dir(path, {(info.st_dev, info.st_ino)})
        else:
            yield _classify(path)


def _walk_dir(path: str, ancestors: set[tuple[int, int]]) -> Iterator[Found]:
    try:
        with os.scandir(path) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        yield Found(path, "problem", f"folder cannot be read ({exc.strerror})")
        return
    for entry in entries:
        try:
            is_dir = entry.is_dir(follow_symlinks=True)
        except OSError as exc:
            yield Found(entry.path, "problem", _stat_problem(exc))
            continue
        if not is_dir:
            if entry.is_symlink() and not os.path.exists(entry.path):
                yield Found(entry.path, "problem", _broken_link(entry.path))
            else:
                yield _classify(entry.path)
            continue
        try:
            info = entry.stat(follow_symlinks=True)
        except OSError as exc:
            yield Found(entry.path, "problem", _stat_problem(exc))
            continue
        key = (info.st_dev, info.st_ino)
        if key in ancestors:
            yield Found(entry.path, "problem", "symlink loop: it points back to a folder above it")
            continue
        yield from _walk_dir(entry.path, ancestors | {key})


def _classify(path: str) -> Found:
    if path.lower().endswith(SUFFIXES):
        return Found(path, "document")
    return Found(path, "skipped")


def _stat_problem(exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return "does not exist"
    if exc.errno == errno.ELOOP:
        return "symlink loop: the link never reaches a file"
    if exc.errno == errno.EACCES:
        return "permission denied"
    return exc.strerror or str(exc)


def _broken_link(path: str) -> str:
    try:
        os.stat(path)
    except OSError as exc:
        return _stat_problem(exc) if exc.errno == errno.ELOOP else "broken symlink"
    return "broken symlink"


def shown(path: str) -> str:
    """A path as it can be stored and printed: a name that is not UTF-8 (held by Python as
    surrogates) gets its odd bytes as backslash escapes, `caf\\xe9.txt`."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    return path


def read(path: str, max_bytes: int) -> Text | Unreadable:
    """Read one file as UTF-8 text, or say plainly why it cannot be summarized."""
    if shown(path) != path:
        return Unreadable(
            shown(path), "file name is not UTF-8 (odd bytes shown as \\x..): rename the file"
        )
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > max_bytes:
                return Unreadable(
                    path,
                    f"larger than SUMMARIZE_MAX_DOC_BYTES ({size:,} bytes > {max_bytes:,}): "
                    "split it or raise the limit",
                )
            raw = handle.read(max_bytes + 1)
    except OSError as exc:
        return Unreadable(path, f"cannot be read ({_stat_problem(exc)})")
    if len(raw) > max_bytes:
        return Unreadable(
            path, f"larger than SUMMARIZE_MAX_DOC_BYTES (over {max_bytes:,} bytes): split it"
        )
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
    if not body.strip():
        return Unreadable(path, "empty file: nothing to summarize")
    body = body.replace("\r\n", "\n")
    encoded = body.encode("utf-8")
    return Text(path, body, hashlib.sha256(encoded).hexdigest(), len(encoded))
