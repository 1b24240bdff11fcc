"""Corpora at URLs: object storage (s3://, gs://, az://, abfs://), hf://datasets/…, and
http(s)://, listed and read through fsspec with the same kinds, limits and failed rows as a
local folder (jobs/folders.py; a file:// URL is walked there, as a local path).

A prefix is walked a folder at a time (on S3, a page of a thousand keys at a time, however
many the prefix holds), in key order. Documents are fetched in windows of FETCH_AT_ONCE,
concurrently where the filesystem can (fsspec's `cat_ranges`), each whole in memory and no larger
than its size limit, which the listing tells before anything is read; record files (JSON
lines, CSV, Parquet) are read as streams, a block at a time. Credentials and endpoints come
from each library's own configuration (for S3, botocore's: AWS_PROFILE, AWS_ENDPOINT_URL,
instance roles) and from SUMMARIZE_STORAGE_OPTIONS.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import BinaryIO

from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from core.errors import StorageUnavailable, described
from core.storage import filesystem
from jobs import formats
from jobs.documents import Unreadable
from jobs.folders import Found, holds_records, is_document

FETCH_AT_ONCE = 64  # documents fetched at a time (concurrently on S3, GCS, Azure, HTTP)
STREAM_BLOCK_BYTES = 4 << 20  # a record file is read this much at a time
PAGE_KEYS = 1000  # keys listed at a time on S3
ATTEMPTS = 3  # of a listing or a fetch that failed for a reason that may pass (past the library's own retries)


def _lasting(exc: BaseException) -> bool:
    """A failure that trying again will not mend: the object, or access to it, or credentials
    are not there."""
    return isinstance(
        exc, FileNotFoundError | PermissionError | IsADirectoryError | ValueError | TypeError
    ) or type(exc).__name__.endswith("CredentialsError")  # botocore's: none, or partial


_retried = retry(
    retry=retry_if_exception(lambda exc: isinstance(exc, Exception) and not _lasting(exc)),
    stop=stop_after_attempt(ATTEMPTS),
    wait=wait_exponential(multiplier=0.2, max=5),
    reraise=True,
)


@dataclass(frozen=True)
class StoredObject:
    """An object a listing found, with its size; once fetched, its bytes (or why not)."""

    fs: object = field(repr=False)  # an fsspec filesystem
    key: str  # the path within `fs`, without the protocol
    size: int
    data: bytes | None = field(default=None, repr=False)
    problem: str | None = None  # why fetching failed

    def open(self, shown: str) -> BinaryIO | Unreadable:
        """The object open for reading: fetched already (in memory, as a file a process can
        be handed), or as a stream for a record file; or why it cannot be read."""
        if self.problem is not None:
            return Unreadable(shown, self.problem)
        if self.data is not None:
            return _in_memory(self.data)
        try:
            stream = _retried(self.fs.open)(self.key, "rb", block_size=STREAM_BLOCK_BYTES)
            return io.BufferedReader(stream, STREAM_BLOCK_BYTES)  # readline(limit), as a file's
        except Exception as exc:  # noqa: BLE001 - whatever the storage library raises
            return Unreadable(shown, _unread(exc))


def walk(url: str, options: dict[str, dict]) -> Iterator[Found]:
    """Every object under `url` (or the object itself), as folders.walk reports files; a
    prefix that is not there is a problem, storage that does not answer after retries ends
    the walk (StorageUnavailable): submitting again later goes on where it stopped."""
    fs, root = filesystem(url, options)
    root = root.rstrip("/") or root
    try:
        info = _retried(fs.info)(root)
    except Exception as exc:  # noqa: BLE001 - whatever the storage library raises
        if not _lasting(exc):
            raise _unreachable(url, exc) from None
        yield Found(url, "problem", _unlisted(exc))
        return
    if info.get("type") != "directory":
        yield _classify(fs, root, info)
        return
    problems: list[OSError] = []
    for info in _listed(fs, root, url, problems):
        yield _classify(fs, info["name"], info)
    for exc in problems:
        yield Found(_url(fs, getattr(exc, "filename", None) or root), "problem", _unlisted(exc))


def _listed(fs, root: str, url: str, problems: list[OSError]) -> Iterator[dict]:
    """The objects below `root` in key order: on S3 a page at a time, elsewhere a folder at a
    time (fsspec's walk, its folders visited in name order)."""
    if hasattr(fs, "_iterdir") and hasattr(fs, "split_path"):  # s3fs
        yield from _pages(fs, root, url)
        return

    def failed(exc: OSError) -> None:
        if not _lasting(exc):
            raise _unreachable(url, exc)
        problems.append(exc)

    for _, folders, files in fs.walk(root, detail=True, on_error=failed):
        ordered = sorted(folders.items())
        folders.clear()
        folders.update(ordered)
        for name in sorted(files):
            yield files[name]
        fs.invalidate_cache()  # a folder's listing is not kept once walked


def _pages(fs, root: str, url: str) -> Iterator[dict]:
    """S3's keys under a prefix, listed without a delimiter a page at a time: a prefix of a
    million keys costs one page of memory."""
    from fsspec.asyn import sync

    bucket, prefix, _ = fs.split_path(root)
    keys = fs._iterdir(bucket, delimiter="", prefix=f"{prefix}/" if prefix else "")

    async def page() -> list[dict]:
        taken: list[dict] = []
        async for info in keys:
            taken.append(info)
            if len(taken) == PAGE_KEYS:
                break
        return taken

    while True:
        try:
            taken = sync(fs.loop, page)
        except Exception as exc:  # noqa: BLE001 - s3fs retried the page already
            raise _unreachable(url, exc) from None
        if not taken:
            return
        yield from (info for info in taken if not info["name"].endswith("/"))


def _unreachable(url: str, exc: BaseException) -> StorageUnavailable:
    return StorageUnavailable(
        f"{url} cannot be listed ({described(exc)}, after retries): check the endpoint "
        "(AWS_ENDPOINT_URL, SUMMARIZE_STORAGE_OPTIONS), the network and the credentials, then "
        "submit again: what is queued stays queued, and nothing is submitted twice."
    )


def _classify(fs, key: str, info: dict) -> Found:
    url = _url(fs, key)
    if not is_document(url):
        return Found(url, "skipped")
    return Found(url, "document", source=StoredObject(fs, key, int(info.get("size") or 0)))


def _url(fs, key: str) -> str:
    return fs.unstrip_protocol(key)


def fetched(found: Iterable[Found], max_bytes: int) -> Iterator[Found]:
    """`found` in its order, each document at a URL fetched (FETCH_AT_ONCE at a time) unless
    it is a record file, read as a stream, or larger than its limit, refused unread."""
    window: list[Found] = []
    for item in found:
        wanted = _to_fetch(item, max_bytes)
        if window and (len(window) >= FETCH_AT_ONCE or not wanted):
            yield from _fetch(window, max_bytes)
            window = []
        if wanted:
            window.append(item)
        else:
            yield item
    yield from _fetch(window, max_bytes)


def _to_fetch(item: Found, max_bytes: int) -> bool:
    stored = item.source
    return (
        isinstance(stored, StoredObject)
        and stored.data is None
        and not holds_records(item.path)
        and stored.size <= formats.limit(item.path, max_bytes)
    )


def _fetch(window: list[Found], max_bytes: int) -> Iterator[Found]:
    """The window's objects fetched together, each read to one byte past its limit (an object
    replaced by a larger one since it was listed is refused, not read whole); one that fails
    for a reason that may pass is tried again on its own, and failing still, is its own row."""
    if not window:
        return
    stored = [item.source for item in window]
    ends = [formats.limit(item.path, max_bytes) + 1 for item in window]
    fs = stored[0].fs
    if all(s.fs is fs for s in stored):
        got = _together(fs, [s.key for s in stored], ends)
    else:
        got = [None] * len(window)
    for item, source, end, data in zip(window, stored, ends, got, strict=True):
        if data is None or (isinstance(data, Exception) and not _lasting(data)):
            data = _alone(source.fs, source.key, end)
        if isinstance(data, Exception):
            yield replace(item, source=replace(source, problem=_unread(data)))
        else:
            yield replace(item, source=replace(source, data=data))


def _together(fs, keys: list[str], ends: list[int]) -> list:
    """Each key's bytes or exception (fsspec's `cat_ranges`: concurrent on async storage,
    and no key read as a glob pattern); all None if the call itself failed."""
    try:
        return fs.cat_ranges(keys, 0, ends, on_error="return")
    except Exception:  # noqa: BLE001 - each object is tried again on its own
        return [None] * len(keys)


def _alone(fs, key: str, end: int) -> bytes | Exception:
    try:
        return _retried(fs.cat_file)(key, 0, end)
    except Exception as exc:  # noqa: BLE001 - whatever the storage library raises
        return exc


def _in_memory(data: bytes) -> BinaryIO:
    """Bytes as a file with a descriptor (extraction processes are handed descriptors), in
    memory: an object is never written to disk."""
    if not hasattr(os, "memfd_create"):  # not Linux
        import tempfile

        handle = tempfile.TemporaryFile()  # noqa: SIM115 - the reader closes it
        handle.write(data)
        handle.seek(0)
        return handle
    fd = os.memfd_create("summarize-object", os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return open(fd, "rb", closefd=True)  # noqa: SIM115 - the reader closes it


def _unread(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "does not exist (removed since it was listed?)"
    if isinstance(exc, PermissionError):
        return f"cannot be read (access denied: {described(exc)}): check the credentials"
    return f"cannot be read ({described(exc)}, after {ATTEMPTS} attempts)"


def _unlisted(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "does not exist (no such bucket, container or key)"
    if isinstance(exc, PermissionError):
        return "cannot be listed (access denied: check the credentials)"
    return f"cannot be listed ({described(exc)}, after {ATTEMPTS} attempts)"
