"""Small files named by options and settings (an instruction, a JSON schema), read the way
documents are: a regular file only, never waiting on a FIFO's writer, and never more than
a limit, so a path to /dev/zero or a pipe is refused with the reason, never read forever."""

from __future__ import annotations

import os
import stat

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
