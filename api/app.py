"""The Starlette app behind `summarize serve`: OpenAI's Files and Batch routes.

Every call names its key (`Authorization: Bearer KEY`) and reaches only what that key made:
another key's file or batch is a 404, as OpenAI answers. A server on loopback with no key
made yet takes any key as the one local user (`local`). Errors are OpenAI's body,
`{"error": {"message", "type", "param", "code"}}`, with its status codes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import redis
import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from api import batches, files, keys
from api.files import BLOCK_BYTES, Refused
from core.presence import live_workers
from core.settings import Settings
from core.tables import stored_files
from readers.status import serving

LOCAL = "local"  # the owner on a loopback server with no key
KINDS = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error"}
LIST_DEFAULT, LIST_MOST = 20, 100


def _error(
    status: int, message: str, param: str | None = None, code: str | None = None
) -> Response:
    kind = KINDS.get(status, "server_error" if status >= 500 else "invalid_request_error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status)


def create_app(
    settings: Settings,
    db: sa.Engine,
    client: redis.Redis,
    *,
    open_to_any_key: bool = False,
    allowed_hosts: Sequence[str] = ("*",),
) -> Starlette:
    """The API over `db` and the queue behind `client`. With `open_to_any_key`, any bearer
    is the local user (a loopback server with no key made)."""

    def owner_of(request: Request) -> str:
        given = request.headers.get("authorization", "")
        scheme, _, key = given.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Refused(
                401,
                "No API key given: send Authorization: Bearer KEY (summarize keys create NAME "
                "makes one).",
                code="invalid_api_key",
            )
        if open_to_any_key:
            return LOCAL
        found = keys.owner(db, key.strip())
        if found is None:
            raise Refused(401, "Incorrect API key provided.", code="invalid_api_key")
        return found

    def route(handler: Callable) -> Callable:
        """A handler run in a thread (it reads the database), its refusals as OpenAI's errors."""

        async def endpoint(request: Request) -> Response:
            try:
                owner = await run_in_threadpool(owner_of, request)
                return await handler(request, owner)
            except Refused as refused:
                return _error(refused.status, refused.message, refused.param, refused.code)

        return endpoint

    async def upload(request: Request, owner: str) -> Response:
        length = request.headers.get("content-length")
        if (
            length
            and length.isdigit()
            and int(length) > (settings.api_max_file_mb << 20) + BLOCK_BYTES
        ):
            raise files.too_large(settings.api_max_file_mb)
        async with request.form(max_files=1, max_fields=8) as form:
            purpose, upload_ = form.get("purpose"), form.get("file")
            if purpose not in files.PURPOSES:
                raise Refused(
                    400,
                    f"purpose {str(purpose)[:40]!r} is not taken here: upload with purpose 'batch'.",
                    "purpose",
                )
            if upload_ is None or isinstance(upload_, str):
                raise Refused(400, "No file given: send it as the multipart field 'file'.", "file")
            blocks = iter(lambda: upload_.file.read(BLOCK_BYTES), b"")
            made = await run_in_threadpool(
                files.store, settings, db, owner, upload_.filename or "upload", blocks
            )
        return JSONResponse(made)

    def _file_row(owner: str, file_id: str):
        with db.connect() as conn:
            row = conn.execute(
                sa.select(stored_files).where(
                    stored_files.c.id == file_id, stored_files.c.owner == owner
                )
            ).first()
        if row is None:
            raise Refused(404, f"No such File object: {file_id}", "file_id", "not_found")
        return row

    async def file_list(request: Request, owner: str) -> Response:
        limit = _limit(request, 10_000)
        query = sa.select(stored_files).where(stored_files.c.owner == owner)
        purpose = request.query_params.get("purpose")
        if purpose:
            query = query.where(stored_files.c.purpose == purpose)
        newest = request.query_params.get("order", "desc") != "asc"
        order = (stored_files.c.created_at, stored_files.c.id)
        after = request.query_params.get("after")

        def read() -> list:
            with db.connect() as conn:
                q = query
                if after:
                    mark = _file_row(owner, after)
                    earlier = sa.tuple_(*order) < (mark.created_at, mark.id)
                    later = sa.tuple_(*order) > (mark.created_at, mark.id)
                    q = q.where(earlier if newest else later)
                keys_ = [c.desc() for c in order] if newest else list(order)
                return conn.execute(q.order_by(*keys_).limit(limit + 1)).all()

        rows = await run_in_threadpool(read)
        data = [files.as_object(row) for row in rows[:limit]]
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": len(rows) > limit,
            }
        )

    async def file_get(request: Request, owner: str) -> Response:
        row = await run_in_threadpool(_file_row, owner, request.path_params["file_id"])
        return JSONResponse(files.as_object(row))

    async def file_content(request: Request, owner: str) -> Response:
        row = await run_in_threadpool(_file_row, owner, request.path_params["file_id"])
        path = files.path_of(settings, row.id)

        def blocks():
            with path.open("rb") as handle:
                while block := handle.read(BLOCK_BYTES):
                    yield block

        return StreamingResponse(
            iterate_in_threadpool(blocks()), media_type="application/octet-stream"
        )

    async def file_delete(request: Request, owner: str) -> Response:
        file_id = request.path_params["file_id"]
        await run_in_threadpool(files.delete, settings, db, owner, file_id)
        return JSONResponse({"id": file_id, "object": "file", "deleted": True})

    async def batch_create(request: Request, owner: str) -> Response:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise Refused(400, "The request body is not JSON.") from None
        made = await run_in_threadpool(batches.create, settings, db, client, owner, body)
        return JSONResponse(made)

    async def batch_get(request: Request, owner: str) -> Response:
        found = await run_in_threadpool(
            batches.retrieve, settings, db, owner, request.path_params["batch_id"]
        )
        return JSONResponse(found)

    async def batch_list(request: Request, owner: str) -> Response:
        after = request.query_params.get("after") or None
        found = await run_in_threadpool(
            batches.listed, settings, db, owner, after, _limit(request, LIST_MOST)
        )
        return JSONResponse(found)

    async def batch_cancel(request: Request, owner: str) -> Response:
        found = await run_in_threadpool(
            batches.cancel, settings, db, owner, request.path_params["batch_id"]
        )
        return JSONResponse(found)

    async def models(request: Request, owner: str) -> Response:
        workers = await run_in_threadpool(live_workers, client, settings.queue)
        data = [
            {"id": model, "object": "model", "created": 0, "owned_by": "summarize"}
            for model in sorted(serving(workers))
        ]
        return JSONResponse({"object": "list", "data": data})

    return Starlette(
        routes=[
            Route("/v1/files", route(upload), methods=["POST"]),
            Route("/v1/files", route(file_list), methods=["GET"]),
            Route("/v1/files/{file_id}", route(file_get), methods=["GET"]),
            Route("/v1/files/{file_id}", route(file_delete), methods=["DELETE"]),
            Route("/v1/files/{file_id}/content", route(file_content), methods=["GET"]),
            Route("/v1/batches", route(batch_create), methods=["POST"]),
            Route("/v1/batches", route(batch_list), methods=["GET"]),
            Route("/v1/batches/{batch_id}", route(batch_get), methods=["GET"]),
            Route("/v1/batches/{batch_id}/cancel", route(batch_cancel), methods=["POST"]),
            Route("/v1/models", route(models), methods=["GET"]),
        ],
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))],
        exception_handlers={404: _not_found, 405: _not_allowed},
    )


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(404, f"Unknown route: {request.method} {request.url.path}", code="unknown_url")


async def _not_allowed(request: Request, exc: Exception) -> Response:
    return _error(405, f"{request.method} is not allowed on {request.url.path}")


def _limit(request: Request, most: int) -> int:
    try:
        value = int(request.query_params.get("limit", LIST_DEFAULT))
    except ValueError:
        raise Refused(400, "limit must be a whole number.", "limit") from None
    if not 1 <= value <= most:
        raise Refused(400, f"limit must be from 1 to {most}.", "limit")
    return value
