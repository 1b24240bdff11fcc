"""The dashboard's door: once keys guard it, every request must carry one.

A browser gives the key through its own password prompt (HTTP Basic: the key as the
password, any user name), a script as `Authorization: Bearer KEY`. Which keys open it is
the caller's to say (`summarize keys create NAME --dashboard` makes one); the key is
checked on every request, so a revoked key stops working at once. Keys are never logged.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

CHALLENGE = 'Basic realm="summarize dashboard", charset="UTF-8"'
MOST = 512  # characters of a credential looked at; a key is 56


def given_key(authorization: str) -> str | None:
    """The key an Authorization header carries (Bearer KEY, or Basic with the key as the
    password or, with no password, as the user name), or None."""
    scheme, _, value = authorization.strip().partition(" ")
    value = value.strip()
    if not value or len(value) > MOST:
        return None
    if scheme.lower() == "bearer":
        return value
    if scheme.lower() != "basic":
        return None
    try:
        pair = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, _, password = pair.partition(":")
    return password or user or None


class KeyGate:
    """ASGI middleware: a request in, when `opens(key)` says its key opens the dashboard."""

    def __init__(self, app: ASGIApp, opens: Callable[[str], bool]) -> None:
        self.app, self.opens = app, opens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        key = given_key(Headers(scope=scope).get("authorization", ""))
        if key is not None and await run_in_threadpool(self.opens, key):
            await self.app(scope, receive, send)
            return
        refused = JSONResponse(
            {
                "error": "This dashboard asks for a key: give one made with "
                "`summarize keys create NAME --dashboard` as the password."
            },
            status_code=401,
            headers={"WWW-Authenticate": CHALLENGE, "Cache-Control": "no-store"},
        )
        await refused(scope, receive, send)
