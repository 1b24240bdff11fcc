"""Failures a user can fix, and the exit statuses the CLI turns them into.

Every message says what went wrong and what to do next; the CLI shows it as
`Error: …` with no traceback (see `summarize.cli`).
"""

from __future__ import annotations

# Exit statuses, documented in the README for cron and scripts.
EXIT_OK = 0
EXIT_ERROR = 1  # a setting or an input the user must fix
EXIT_USAGE = 2  # click's own status for a bad command line
EXIT_DOCUMENTS_FAILED = 3  # the batch finished, but some documents failed
EXIT_DEADLINE = 4  # waited for the batch and the deadline passed first
EXIT_UNREACHABLE = 5  # Redis, the database or object storage could not be reached


class SummarizeError(Exception):
    """A failure the user can fix; the message says how."""

    exit_code = EXIT_ERROR


class SettingsError(SummarizeError):
    """A SUMMARIZE_* variable holds a value we refuse."""


class UnreachableError(SummarizeError):
    """Redis or the database did not answer."""

    exit_code = EXIT_UNREACHABLE


class BrokerUnavailable(UnreachableError):
    """Redis did not answer."""


class DatabaseUnavailable(UnreachableError):
    """The database did not answer."""


class StorageUnavailable(UnreachableError):
    """Object storage failed after retries, or refused (no such bucket, access denied)."""


class NoDatabase(SummarizeError):
    """A command that reads the database found none: nothing was submitted there yet."""


class ModelMissing(SummarizeError):
    """The model folder the worker needs is not there."""


class EngineError(SummarizeError):
    """The engine could not be built with the profile asked for."""


def described(exc: BaseException, longest: int = 300) -> str:
    """An exception as one line a user can read: its type and the start of its message."""
    message = " ".join(str(exc).split())
    if len(message) > longest:
        message = message[: longest - 1] + "…"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
