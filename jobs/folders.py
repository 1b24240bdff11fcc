"""Finding documents under the paths a user gives, and opening each one safely.

Walking streams: nothing here holds more than one folder's listing at a time, so a folder
of a million files costs no more memory than a folder of ten.

Nothing below a folder given is reached through a path that a symlink could redirect:
the folder is held open, and every folder and file below it is opened from it a
component at a time, following no link (`_Root`). A subfolder swapped for a link after
it was listed is refused, never read through. The links the walk does follow (inside the
folder, or anywhere with --follow-links) are resolved once, where it meets them. A file
is opened without waiting (a FIFO is refused, never read) and must be a regular file.
"""

from __future__ import annotations

import errno
import os
import stat
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from jobs import formats
from jobs.documents import Unreadable
from jobs.markup import MARKDOWN_SUFFIXES

PARQUET = ".parquet"  # each row a document (jobs/parquet.py)
RECORD_SUFFIXES = (".jsonl", ".csv", PARQUET)  # each record a document (jobs/records.py)
SUFFIXES = (".txt", *MARKDOWN_SUFFIXES, *formats.SUFFIXES, *RECORD_SUFFIXES)

OUTSIDE = (
    "a symlink to {target}, outside the folder given: not followed (--follow-links follows it)"
)
WALKED = "a second way into a folder walked already: walked once"
LOOP = "symlink loop: it points back to a folder above it"
SWAPPED = "a folder on its path was replaced since it was listed (by a symlink?): not followed"
REPLACED = "replaced since it was listed (by a symlink?): not walked"
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # never wait for a FIFO's writer


class _Root:
    """A folder given (or one --follow-links reached), held open: every folder and file
    below it is opened from this handle a component at a time, following no symlink, so a
    folder swapped for a link after it was listed cannot lead anywhere else."""

    def __init__(self, path: str):
        self.fd = os.open(path, _FOLDER)
        weakref.finalize(self, os.close, self.fd)
        self.real = os.path.realpath(path)

    def beneath(self, real: str) -> tuple[str, ...] | None:
        """The components of a real path below this folder, or None if it is elsewhere."""
        if real == self.real:
            return ()
        if _inside(real, self.real):
            return tuple(real[len(self.real.rstrip("/")) + 1 :].split("/"))
        return None

    def open(self, parts: tuple[str, ...], flags: int) -> int:
        """A descriptor for the file or folder at `parts` (OSError if there is none; a
        symlink on the way is ELOOP, or SWAPPED for a folder above the last part)."""
        if not parts:
            return os.open(".", flags, dir_fd=self.fd)
        folder = self.fd
        try:
            for part in parts[:-1]:
                try:
                    below = os.open(part, _FOLDER | os.O_NOFOLLOW, dir_fd=folder)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise OSError(exc.errno, SWAPPED) from None
                    raise
                if folder != self.fd:
                    os.close(folder)
                folder = below
            return os.open(parts[-1], flags | os.O_NOFOLLOW, dir_fd=folder)
        finally:
            if folder != self.fd:
                os.close(folder)


@dataclass(frozen=True)
class Found:
    """One thing the walk met: a candidate document, a file it skips, or a path it cannot use.

    A document reached through a symlink has the link's path and the file it leads to
    (`target`). Under a folder given, a file is opened from that folder's handle (`root`,
    through `parts`); a path given itself, or a file --follow-links reached elsewhere, by
    its path."""

    path: str
    kind: str  # "document", "skipped" (not text or Markdown: SUFFIXES) or "problem"
    problem: str | None = None  # for a problem, or a document refused before it is read
    target: str | None = None
    root: _Root | None = field(default=None, repr=False, compare=False)
    parts: tuple[str, ...] = field(default=(), repr=False, compare=False)
    source: object = field(default=None, repr=False, compare=False)  # at a URL: jobs/objects.py

    @property
    def size(self) -> int | None:
        """An object's size as its listing gave it; None for a local file (not stat'ed yet)."""
        return getattr(self.source, "size", None)

    def open(self) -> BinaryIO | Unreadable:
        """The file open for reading, or why it is not read (see `open_regular`)."""
        if self.source is not None:
            return self.source.open(self.path)
        if self.root is None:
            return open_regular(self.path, self.target)
        if shown(self.path) != self.path:
            return _badly_named(self.path)
        try:
            fd = self.root.open(self.parts, _FILE)
        except OSError as exc:
            return _unopened(self.path, exc)
        return _regular(self.path, fd)


@dataclass
class _Listing:
    """A folder being walked: its entries (name, a symlink?, a folder?) in name order."""

    root: _Root
    parts: tuple[str, ...]
    path: str
    entries: Iterator[tuple[str, bool, bool]]


def walk(paths: Iterable[str | os.PathLike], follow_links: bool = False) -> Iterator[Found]:
    """Every file under `paths`, in a stable order, without recursion; each folder walked once.

    Symlinks are followed while they stay inside the path given (anywhere with
    `follow_links`); a link that leaves it, a loop, or a second way into a folder already
    walked is reported, never walked again, so a tree of links cannot multiply its files.
    """
    visited: set[tuple[int, int]] = set()
    for given in paths:
        path = os.path.abspath(os.fspath(given))
        try:
            info = os.stat(path)
        except OSError as exc:
            yield Found(path, "problem", stat_problem(exc))
            continue
        if not stat.S_ISDIR(info.st_mode):
            yield _classify(path, os.path.realpath(path))
            continue
        try:
            root = _Root(path)
        except OSError as exc:
            yield Found(path, "problem", f"folder cannot be read ({stat_problem(exc)})")
            continue
        visited.discard((info.st_dev, info.st_ino))  # a folder given twice is walked twice
        first = _listing(root, (), path, path, visited)
        stack = [first] if isinstance(first, _Listing) else []  # no recursion: any depth is fine
        if isinstance(first, Found):
            yield first
        while stack:
            entry = next(stack[-1].entries, None)
            if entry is None:
                stack.pop()
                continue
            seen = _look(stack[-1], *entry, follow_links, visited)
            if isinstance(seen, Found):
                yield seen
            else:
                stack.append(seen)


def _listing(
    root: _Root, parts: tuple[str, ...], path: str, real: str, visited: set
) -> _Listing | Found:
    """A folder opened from its root and listed, or why not (a loop, a second way in)."""
    try:
        fd = root.open(parts, _FOLDER)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return Found(path, "problem", REPLACED)
        return Found(path, "problem", f"folder cannot be read ({stat_problem(exc)})")
    try:
        info = os.fstat(fd)
        key = (info.st_dev, info.st_ino)
        if key in visited:
            above = _inside(os.path.realpath(os.path.dirname(path)), real)
            return Found(path, "problem", LOOP if above else WALKED)
        visited.add(key)
        with os.scandir(fd) as it:  # read whole while the folder is open: sorted anyway
            entries = sorted((e.name, e.is_symlink(), _is_folder(e)) for e in it)
    except OSError as exc:
        return Found(path, "problem", f"folder cannot be read ({stat_problem(exc)})")
    finally:
        os.close(fd)
    return _Listing(root, parts, path, iter(entries))


def _is_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False  # opened as a file later, which says what is wrong with it


def _look(
    folder: _Listing, name: str, link: bool, is_folder: bool, follow_links: bool, visited: set
) -> Found | _Listing:
    """What one entry is: a file or a problem (as Found), or a folder to walk."""
    path = os.path.join(folder.path, name)
    if not link:
        if is_folder:
            return _listing(folder.root, (*folder.parts, name), path, path, visited)
        return _classify(path, None, folder.root, (*folder.parts, name))
    target = os.path.realpath(path)
    try:
        info = os.stat(path)
    except OSError:
        return Found(path, "problem", _broken_link(path))
    inside = folder.root.beneath(target)
    if inside is None and not follow_links:
        refusal = OUTSIDE.format(target=target)
        return Found(path, "document" if is_document(path) else "problem", refusal)
    if not stat.S_ISDIR(info.st_mode):
        if inside is None:  # --follow-links: the file elsewhere, opened by its path
            return _classify(path, target)
        return _classify(path, target, folder.root, inside)
    if (info.st_dev, info.st_ino) in visited:
        above = _inside(os.path.realpath(os.path.dirname(path)), target)
        return Found(path, "problem", LOOP if above else WALKED)
    if inside is not None:
        return _listing(folder.root, inside, path, target, visited)
    try:
        elsewhere = _Root(target)
    except OSError as exc:
        return Found(path, "problem", f"folder cannot be read ({stat_problem(exc)})")
    return _listing(elsewhere, (), path, target, visited)


def _inside(target: str, root: str) -> bool:
    return target == root or target.startswith(root.rstrip("/") + "/")


def is_document(path: str) -> bool:
    return path.lower().endswith(SUFFIXES)


def holds_records(path: str) -> bool:
    """A JSON lines or CSV file: each of its records is a document."""
    return path.lower().endswith(RECORD_SUFFIXES)


def _classify(
    path: str, target: str | None, root: _Root | None = None, parts: tuple[str, ...] = ()
) -> Found:
    if is_document(path):
        target = target if target != path else None
        return Found(path, "document", target=target, root=root, parts=parts)
    return Found(path, "skipped")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a file"


def stat_problem(exc: OSError) -> str:
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
        return stat_problem(exc) if exc.errno == errno.ELOOP else "broken symlink"
    return "broken symlink"


def shown(path: str) -> str:
    """A path as it can be stored and printed: a name that is not UTF-8 (held by Python as
    surrogates) gets its odd bytes as backslash escapes, `caf\\xe9.txt`."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    return path


def open_regular(path: str, target: str | None = None) -> BinaryIO | Unreadable:
    """The file (`target`, for a link) open for reading, or why it is not read: opened
    without following a symlink and without waiting, and it must be a regular file with a
    UTF-8 name, so a FIFO or a device is refused, never read."""
    if shown(path) != path:
        return _badly_named(path)
    try:
        fd = os.open(target or path, _FILE | os.O_NOFOLLOW)
    except OSError as exc:
        return _unopened(path, exc)
    return _regular(path, fd)


def _badly_named(path: str) -> Unreadable:
    return Unreadable(
        shown(path), "file name is not UTF-8 (odd bytes shown as \\x..): rename the file"
    )


def _unopened(path: str, exc: OSError) -> Unreadable:
    if exc.errno == errno.ELOOP and exc.strerror != SWAPPED:
        return Unreadable(path, "a symlink where a file was expected: not followed")
    if exc.strerror == SWAPPED:
        return Unreadable(path, SWAPPED)
    return Unreadable(path, f"cannot be read ({stat_problem(exc)})")


def _regular(path: str, fd: int) -> BinaryIO | Unreadable:
    """An open descriptor as a file, if it is a regular file; closed if not."""
    try:
        handle = open(fd, "rb", closefd=True)  # noqa: SIM115 - the caller closes it
    except OSError as exc:  # a folder is refused by open() itself
        os.close(fd)
        return Unreadable(path, f"cannot be read ({stat_problem(exc)})")
    try:
        mode = os.fstat(handle.fileno()).st_mode
    except OSError as exc:
        handle.close()
        return Unreadable(path, f"cannot be read ({stat_problem(exc)})")
    if not stat.S_ISREG(mode):
        handle.close()
        return Unreadable(path, f"not a regular file ({_kind(mode)}): not read")
    return handle
