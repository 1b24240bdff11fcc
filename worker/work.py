"""The worker's vocabulary, shared by its parts: a document it took on (`Claim`), and what
became of it (`Outcome`), as written to its rows by worker/recorder.py."""

from __future__ import annotations

from dataclasses import dataclass

from core.prompt import SummarySpec


@dataclass(frozen=True)
class Claim:
    """A document the worker took on: its text, how to summarize it, and how many times it
    has been tried."""

    key: str
    content_hash: str
    body: str
    model: str
    spec: SummarySpec
    attempts: int


@dataclass(frozen=True)
class Outcome:
    """What became of one document, as written to its rows: the rows' new status and figures."""

    key: str
    status: str  # Status.SUCCEEDED, FAILED, or QUEUED: tried again in `retry_in_s`
    summary: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    parts: int | None = None
    finish_reason: str | None = None
    repetition: float | None = None  # quality signals (core/quality.py)
    copied: float | None = None
    novel_numbers: int | None = None
    compression: float | None = None
    looped: bool | None = None
    flaw: str | None = None
    error: str | None = None
    retry_in_s: float | None = None  # with Status.QUEUED: when to try again
