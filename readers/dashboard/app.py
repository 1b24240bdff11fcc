"""The Starlette app behind `summarize dashboard`: the page, its static files, two JSON reads.

The page polls `api/overview` every few seconds while a batch has documents
queued or running, and `api/batches/{name}` for the batch opened below the
charts. The app only reads; the engine it is given should be read-only too
(`queries.open_readonly`), so a bug here cannot change the results table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from readers.dashboard import queries
from readers.dashboard.gate import KeyGate

STATIC = Path(__file__).resolve().parent / "static"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")

# The page loads nothing from elsewhere and runs no inline script.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _json(data: object, status_code: int = 200) -> Response:
    body = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return Response(
        body,
        status_code=status_code,
        media_type="application/json",
        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
    )


def _bounded(request: Request, name: str, default: int, high: int) -> int:
    try:
        value = int(request.query_params.get(name, default))
    except ValueError:
        return default
    return min(max(value, 1), high)


def create_app(
    db: sa.Engine,
    *,
    allowed_hosts: Sequence[str] = ("*",),
    opens: Callable[[str], bool] | None = None,
) -> Starlette:
    """The dashboard over `engine`. Pass LOOPBACK_NAMES as `allowed_hosts` when it listens
    on loopback only: a page on another site cannot then reach it by DNS rebinding. With
    `opens`, every request must carry a key it accepts (readers/dashboard/gate.py)."""

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers=PAGE_HEADERS)

    def overview(request: Request) -> Response:
        latest = _bounded(request, "latest", queries.LATEST_BATCHES, 200)
        days = _bounded(request, "days", queries.DAYS, 366)
        return _json(queries.overview(db, latest=latest, days=days))

    def batch(request: Request) -> Response:
        name = request.path_params["name"]
        detail = queries.batch_detail(db, name)
        if detail is None:
            return _json({"error": f"No batch named {name!r}."}, status_code=404)
        return _json(detail)

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/api/overview", overview),
            Route("/api/batches/{name:path}", batch),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        middleware=[
            Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)),
            *([Middleware(KeyGate, opens=opens)] if opens else []),
        ],
    )
    return app
