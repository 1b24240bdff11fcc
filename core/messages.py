"""Our messages and the queues they wait in, every fact about them in one place.

Documents travel in chunks: one Celery task message (`summarize.chunk`) carries up to
`Settings.chunk_size` result keys (SUMMARIZE_CHUNK_DOCS, or the profile's `max_num_seqs`).
Keys are packed as unpadded base64url of their 32 bytes (43 characters each, no
separators): kombu's Redis transport stores the body base64-encoded again, and a chunk of
64 hex keys would cost over 100 bytes a document where this costs about 70.

Each model has a queue of its own (`queue_for`): a batch for model X waits where only
workers running X take it. Beside it wait the more and the less urgent batches' documents
(`lists_of`: `QUEUE.high`, `QUEUE`, `QUEUE.low`); a worker consumes the three in that order
(kombu's `priority` queue order: its BRPOP names them so), so it takes from the most urgent
one that holds a message, whatever waits in the others.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable, Iterator

from core.settings import DEFAULT_MODEL_NAME, MAX_CHUNK_DOCS, PRIORITY_NAMES, Settings

TASK_NAME = "summarize.chunk"
KEY_BYTES = 32  # a result key is a SHA-256
KEY_CHARS = 43  # as unpadded base64url


class BadMessage(ValueError):
    """A message that is not a chunk of result keys: rejected, logged, never run."""


def pack(keys: Iterable[str]) -> str:
    """Hex result keys as one string of 43-character base64url keys."""
    raw = b"".join(bytes.fromhex(key) for key in keys)
    return "".join(
        base64.urlsafe_b64encode(raw[i : i + KEY_BYTES])[:KEY_CHARS].decode("ascii")
        for i in range(0, len(raw), KEY_BYTES)
    )


def unpack(packed: object) -> list[str]:
    """The hex result keys of a chunk; BadMessage for anything else (checked before use),
    a chunk of more keys than a message may carry among them."""
    if not isinstance(packed, str) or not packed or len(packed) % KEY_CHARS:
        raise BadMessage(f"not a chunk of result keys: {str(packed)[:80]!r}")
    if len(packed) > MAX_CHUNK_DOCS * KEY_CHARS:
        raise BadMessage(
            f"a chunk of {len(packed) // KEY_CHARS:,} result keys, more than a message carries "
            f"({MAX_CHUNK_DOCS:,})"
        )
    keys = []
    for i in range(0, len(packed), KEY_CHARS):
        piece = packed[i : i + KEY_CHARS]
        try:
            raw = base64.b64decode(piece + "=", altchars=b"-_", validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != KEY_BYTES:
            raise BadMessage(f"not a chunk of result keys: {piece!r}")
        keys.append(raw.hex())
    return keys


def chunks(keys: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for key in keys:
        chunk.append(key)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def queue_for(base: str, model: str) -> str:
    """The queue of a model's documents: SUMMARIZE_QUEUE itself for the default model, and
    `QUEUE.NAME-HASH` for any other (its last path part and a hash of the whole name, so two
    folders both called `model` get two queues)."""
    if model == DEFAULT_MODEL_NAME:
        return base
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", model.rstrip("/").rsplit("/", 1)[-1])[:40]
    return f"{base}.{tail or 'model'}-{hashlib.sha256(model.encode()).hexdigest()[:8]}"


def home(settings: Settings) -> str:
    """The queue this process's model reads from (a worker) and writes to (a producer)."""
    return queue_for(settings.queue, settings.model_name)


def at(queue: str, priority: str) -> str:
    """Where a batch of `priority` waits in a model's queue (`normal`, or a value that is none
    of PRIORITY_NAMES: the queue itself)."""
    return f"{queue}.{priority}" if priority != "normal" and priority in PRIORITY_NAMES else queue


def lists_of(queue: str) -> list[str]:
    """The lists a model's queue's messages wait in, the most urgent first."""
    return [at(queue, priority) for priority in PRIORITY_NAMES]


NORMAL = PRIORITY_NAMES.index("normal")


def urgency(where: str | None, queue: str) -> int:
    """How urgent a message of `queue` is, by the list it came from (its routing key): its
    priority's place in PRIORITY_NAMES, 0 the most urgent; the queue itself, or a list that is
    not one of its own, is `normal` (a queue's own name may end in `.high`)."""
    for rank, priority in enumerate(PRIORITY_NAMES):
        if where == at(queue, priority):
            return rank
    return NORMAL
