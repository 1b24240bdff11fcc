"""The documents in the engine: each one's claim, and its work by engine request id.

A long document is several requests (its parts, then a combining pass); each
finished request is handed to the work that asked for it, which may ask for more.
"""

from __future__ import annotations

import itertools

from worker.engine import Engine, Finished
from worker.parts import Request, Work
from worker.work import Claim


class Running:
    def __init__(self, engine: Engine):
        self.engine = engine
        self._claims: dict[str, Claim] = {}  # by key
        self._work: dict[str, Work] = {}  # by engine request id
        self._ids = itertools.count()
        self._templates: dict[str, int] = {}  # instruction -> its prompt's tokens without text

    def work(self, claim: Claim) -> Work:
        """A document's way through the engine; `start` its first requests."""
        instruction = claim.spec.instruction
        template = self._templates.get(instruction)
        if template is None:
            template = len(self.engine.prompt_ids(instruction, ""))
            self._templates[instruction] = template
        return Work(claim.key, claim.spec, self.engine, self._new_id, template_tokens=template)

    def _new_id(self) -> str:
        return f"r{next(self._ids)}"

    def start(self, claim: Claim, work: Work, requests: list[Request]) -> None:
        self.add(work, requests, follow_up=False)
        self._claims[claim.key] = claim

    def add(self, work: Work, requests: list[Request], follow_up: bool = True) -> None:
        """Add a document's requests to the engine: its first ones (`start`), or those its
        finished requests asked for, which go before the documents waiting (`follow_up`)."""
        for request in requests:
            self._work[request.request_id] = work
            self.engine.add(
                request.request_id,
                request.prompt_ids,
                request.spec,
                request.loop_breaking,
                request.watch_loops,
                follow_up,
            )

    def finished(self, finished: Finished) -> Work | None:
        """The work a finished request belongs to (None: it was dropped meanwhile)."""
        return self._work.pop(finished.request_id, None)

    def drop(self, work: Work) -> list[str]:
        """Forget a document's engine requests; returns those still running."""
        ids = work.request_ids()
        for request_id in ids:
            self._work.pop(request_id, None)
        return ids

    def claim(self, key: str) -> Claim | None:
        return self._claims.get(key)

    def discard(self, key: str) -> None:
        """Let go of a claim: the document's rows are written (or it went back to the queue)."""
        self._claims.pop(key, None)

    def unfinished(self) -> dict[str, Work]:
        """The documents with requests in the engine, by key."""
        return {work.key: work for work in self._work.values()}

    @property
    def keys(self) -> list[str]:
        """Keys of the documents claimed, for their row leases (read from another thread)."""
        while True:
            try:
                return list(self._claims)
            except RuntimeError:  # the dict changed while we copied it
                continue
