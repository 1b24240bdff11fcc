"""What the CLI prints of text that users and files wrote: control characters shown, not obeyed.

A batch name, a file name or an error that carries one may hold escape sequences
that would move the cursor, retitle the window or hide the lines above; they are
printed as `\\x1b`-style escapes instead (newlines and tabs kept).
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with every control character but newline and tab shown as an escape."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def say(text: str = "", *, err: bool = False) -> None:
    """Print a line of a command's output for people, its control characters shown."""
    import click

    click.echo(printable(text), err=err)


def counted(count: int, one: str, many: str | None = None) -> str:
    """`1 batch`, `2 batches`: a count with its noun in the number it takes."""
    return f"{count:,} {one if count == 1 else many or one + 's'}"
