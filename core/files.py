"""Files of summarize's own: those named by options and settings, and those it makes.

An option's file (an instruction, a JSON schema) is read the way documents are: a regular
file only, never waiting on a FIFO's writer, and never more than a limit, so a path to
/dev/zero or a pipe is refused with the reason, never read forever. What summarize makes
(the data directory, the SQLite database, the embedded Redis's files) holds every
document's text and summary: it is made for this user alone."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from core.errors import SettingsError

OPTION_FILE_BYTES = 100_000  # an instruction or a schema: longer fits no model's context


def read_named(path: str | os.PathLike, source: str, holding: str) -> str:
    """The UTF-8 text of the file at `path`, which `source` names (an option or a variable)
    to hold `holding` ("the instruction"); a SettingsError that says the fix if not."""
    named = f"{source}={os.fspath(path)!r}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SettingsError(
            f"{named} cannot be read ({exc.strerror}): point it at a UTF-8 text file holding "
            f"{holding}."
        ) from None
    with open(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SettingsError(
                f"{named} is not a regular file: point it at a file holding {holding}."
            )
        raw = handle.read(OPTION_FILE_BYTES + 1)
    if len(raw) > OPTION_FILE_BYTES:
        raise SettingsError(
            f"{named} is larger than {OPTION_FILE_BYTES:,} bytes: {holding} must be shorter."
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SettingsError(f"{named} is not UTF-8 text: save it as UTF-8.") from None


PRIVATE_FOLDER = 0o700  # the data directory holds every document's text and summary
PRIVATE_FILE = 0o600


def private_folder(path: Path) -> Path:
    """The folder, made for this user alone if it is missing (its parents as usual)."""
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=PRIVATE_FOLDER)
    return path


def private_file(path: Path) -> Path:
    """The file, made empty for this user alone if it is missing (SQLite then gives its
    journal files the same mode)."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
    return path


def open_to_others(paths: list[Path]) -> list[str]:
    """Those of the paths that exist and other users may read, each with the fix."""
    loose = []
    for path in paths:
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            continue
        if mode & 0o077:
            wanted = PRIVATE_FOLDER if path.is_dir() else PRIVATE_FILE
            loose.append(f"{path} is {mode:o} (chmod {wanted:o} {path})")
    return loose
