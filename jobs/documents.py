"""What reading a corpus makes of each file or record: a document to summarize (`Text`),
or one that cannot be used, and why (`Unreadable`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Text:
    """A document read successfully. A record (jobs/records.py) also has its id, its other
    fields, and, from an OpenAI Batch request, its own instruction and summary length."""

    path: str
    body: str
    content_hash: str
    size_bytes: int
    doc_id: str | None = None  # None: the path
    metadata: str | None = None  # a JSON object
    instruction: str | None = None  # None: the batch's
    max_tokens: int | None = None
    file: str | None = None  # a record's file (its path is FILE:LINE)

    @property
    def weight(self) -> int:
        """About the bytes it holds until its chunk is written: the text, and a record's id,
        metadata and instruction (which may be as large)."""
        extra = (self.doc_id, self.metadata, self.instruction)
        return self.size_bytes + sum(len(part) for part in extra if part)


@dataclass(frozen=True)
class Unreadable:
    """A text or Markdown file that cannot become a document, and why, in words a user can act on."""

    path: str
    reason: str
    doc_id: str | None = None  # a record's id, when it had one
