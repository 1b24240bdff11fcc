"""Notices: a batch that names a URL is told there, once, when it has ended.

A batch names its URL (`submit --notify`, SUMMARIZE_NOTIFY_URL, the API's metadata
`notify_url`) once every document is queued (`watch`), so a batch still being submitted
never looks ended. Workers and `summarize serve` look every LOOK_EVERY_S for such batches
with nothing queued or running, claim each (one UPDATE: one process sends it), and POST
OpenAI's event for it (`batch.completed`, `batch.failed`, `batch.expired` or
`batch.cancelled`), signed as Standard Webhooks sign (`webhook-id`, `webhook-timestamp`,
`webhook-signature`: HMAC-SHA256 under SUMMARIZE_NOTIFY_SECRET), as OpenAI signs its own.
A refused or unreachable receiver is tried again with backoff (tenacity); `notice` keeps
what came of it. A claim whose sender died before saying is taken again after
CLAIM_LAPSE_S; the event keeps its id, so a receiver can tell a repeat.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
import tenacity

from core.tables import api_batches, batch_rollups, batches, utcnow

log = logging.getLogger(__name__)

LOOK_EVERY_S = 2.0
CLAIM_LAPSE_S = 600  # longer than every retry of one notice together
ATTEMPTS = 5
TIMEOUT_S = 10
NOTICE_CHARS = 500  # batches.notice


@dataclass(frozen=True)
class Ending:
    """A batch that ended and has a notice to send."""

    batch: str
    url: str
    kind: str  # the event's type: batch.completed, batch.failed, ...
    event_id: str
    claimed: datetime | None  # the claim it had when seen: None, or one that lapsed


def watch(db: sa.Engine, batch: str, url: str) -> None:
    """From now on, `batch` is told at `url` when it ends (every document is queued)."""
    with db.begin() as conn:
        conn.execute(
            batches.update()
            .where(batches.c.name == batch)
            .values(notify_url=url, notified_at=None, notice=None)
        )


def ended(db: sa.Engine, now: datetime | None = None) -> list[Ending]:
    """Batches with a notice to send and no document queued or running."""
    now = now or utcnow()
    lapsed = now - timedelta(seconds=CLAIM_LAPSE_S)
    rollup = sa.outerjoin(batches, batch_rollups, batch_rollups.c.batch == batches.c.name)
    query = (
        sa.select(
            batches.c.name,
            batches.c.notify_url,
            batches.c.notified_at,
            batches.c.created_at,
            sa.func.coalesce(batch_rollups.c.cancelled, 0).label("cancelled"),
            sa.func.coalesce(batch_rollups.c.expired, 0).label("expired"),
            api_batches.c.failed_at,
        )
        .select_from(rollup.outerjoin(api_batches, api_batches.c.id == batches.c.name))
        .where(
            batches.c.notify_url.is_not(None),
            sa.or_(
                batches.c.notified_at.is_(None),
                sa.and_(batches.c.notice.is_(None), batches.c.notified_at < lapsed),
            ),
            sa.func.coalesce(batch_rollups.c.queued, 0) == 0,
            sa.func.coalesce(batch_rollups.c.running, 0) == 0,
        )
    )
    with db.connect() as conn:
        found = conn.execute(query).all()
    return [
        Ending(
            row.name,
            row.notify_url,
            _kind(row),
            "evt_" + hashlib.sha256(f"{row.name}\0{row.created_at}".encode()).hexdigest()[:24],
            row.notified_at,
        )
        for row in found
    ]


def _kind(row) -> str:
    if row.failed_at is not None:
        return "batch.failed"
    if row.cancelled:
        return "batch.cancelled"
    if row.expired:
        return "batch.expired"
    return "batch.completed"


def claim(db: sa.Engine, ending: Ending) -> bool:
    """Whether this process sends `ending`'s notice: true for exactly one that asks."""
    seen = (
        batches.c.notified_at.is_(None)
        if ending.claimed is None
        else batches.c.notified_at == ending.claimed
    )
    with db.begin() as conn:
        taken = conn.execute(
            batches.update()
            .where(batches.c.name == ending.batch, batches.c.notify_url == ending.url, seen)
            .values(notified_at=utcnow())
        )
    return taken.rowcount == 1


def event(ending: Ending, now: float | None = None) -> bytes:
    """The body of the notice: OpenAI's batch event."""
    return json.dumps(
        {
            "object": "event",
            "id": ending.event_id,
            "type": ending.kind,
            "created_at": int(time.time() if now is None else now),
            "data": {"id": ending.batch},
        },
        separators=(",", ":"),
    ).encode()


def headers(secret: str, event_id: str, body: bytes, now: float | None = None) -> dict[str, str]:
    """Standard Webhooks' headers: the event's id, the time, and the signature of both and
    the body (`v1,` then base64 of HMAC-SHA256 under the secret's bytes)."""
    stamp = str(int(time.time() if now is None else now))
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = hmac.new(key, f"{event_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    return {
        "content-type": "application/json",
        "user-agent": "summarize-notices",
        "webhook-id": event_id,
        "webhook-timestamp": stamp,
        "webhook-signature": "v1," + base64.b64encode(signed).decode(),
    }


class Retry(Exception):
    """The receiver could not take the notice now (unreachable, 5xx, 408, 429)."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # a notice goes where it was asked to, only
        return None


_opener = urllib.request.build_opener(_NoRedirects)


def deliver(url: str, secret: str, ending: Ending, wait_s: float = 2.0) -> str:
    """POST the notice, tried again while the receiver cannot take it; what came of it."""
    tries = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(Retry),
        stop=tenacity.stop_after_attempt(ATTEMPTS),
        wait=tenacity.wait_exponential(multiplier=wait_s, max=60),
        reraise=True,
    )
    try:
        for attempt in tries:
            with attempt:
                status = _post(url, secret, ending)
    except Retry as exc:
        return f"undelivered after {ATTEMPTS} attempts: {exc}"[:NOTICE_CHARS]
    number = attempt.retry_state.attempt_number
    if status >= 300:
        return f"refused: HTTP {status} (not tried again)"
    return f"delivered: HTTP {status} after {number} attempt{'s' if number > 1 else ''}"


def _post(url: str, secret: str, ending: Ending) -> int:
    body = event(ending)
    request = urllib.request.Request(
        url, data=body, headers=headers(secret, ending.event_id, body), method="POST"
    )
    try:
        with _opener.open(request, timeout=TIMEOUT_S) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        if exc.code >= 500 or exc.code in (408, 429):
            raise Retry(f"HTTP {exc.code}") from None
        return exc.code
    except (OSError, ValueError) as exc:  # unreachable, refused, timed out, a bad address
        raise Retry(str(getattr(exc, "reason", exc)) or type(exc).__name__) from None


def send_due(db: sa.Engine, secret: str, wait_s: float = 2.0) -> int:
    """Send the notice of every batch that has ended and not been told; how many were sent."""
    sent = 0
    for ending in ended(db):
        if not claim(db, ending):
            continue  # another worker or server sends it
        outcome = deliver(ending.url, secret, ending, wait_s)
        with db.begin() as conn:
            conn.execute(
                batches.update().where(batches.c.name == ending.batch).values(notice=outcome)
            )
        log.info("batch %s: %s notice %s", ending.batch, ending.kind, outcome)
        sent += 1
    return sent


class Notices:
    """A thread that sends the notices due every LOOK_EVERY_S, and once more at `stop`."""

    def __init__(self, db: sa.Engine, secret: str | None):
        self._db, self._secret = db, secret
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="notices", daemon=True)

    def start(self) -> Notices:
        if self._secret is not None:  # without a secret nothing is sent (submit refuses it)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop looking, after a last look: a burst worker's last batch is told as it ends.
        A notice still being tried is left to its claim's lapse (another process sends it)."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(TIMEOUT_S)
            if not self._thread.is_alive():
                self._look()

    def _run(self) -> None:
        while not self._stop.wait(LOOK_EVERY_S):
            self._look()

    def _look(self) -> None:
        try:
            send_due(self._db, self._secret)
        except Exception as exc:  # noqa: BLE001 - the database is away: the next look
            log.warning("could not send the notices of ended batches: %s", exc)
