"""A small real HTTP server on 127.0.0.1 for the HTTP tool tests.

    async with LocalServer() as server:
        server.url("/text")                      # http://127.0.0.1:PORT/text
        server.url("/echo", host="app.test")     # same port, another host name

Routes: `/text`, `/latin1` (ISO-8859-1 text), `/big` (10,000 bytes), `/binary` (a PNG-ish
body), `/empty` (204), `/status/{code}` (any method; that status, a short body),
`/redirect?to=URL[&code=302]`, `/loop` (redirects to itself), `/echo` (any method: JSON with
the method, query, JSON body and headers it received), `/hang` (answers only when the test
ends or `release()` is called).

Served by uvicorn (h11, lifespan off, no signal handlers, no logging config) in the current
event loop, on a socket bound to 127.0.0.1:0 that listens before `serve()`; entering waits
for start-up on an event, under `anyio.fail_after`.
"""

from __future__ import annotations

import json
from typing import Any, Self

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from tests.fakes.serving import Served

ANY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE"]
BIG_BODY_BYTES = 10_000


class LocalServer:
    """The test server; an async context manager. See the module docstring."""

    def __init__(self) -> None:
        self.port = 0
        self._release = anyio.Event()
        self._served: Served | None = None
        self.app = Starlette(
            routes=[
                Route("/text", _text),
                Route("/latin1", _latin1),
                Route("/big", _big),
                Route("/binary", _binary),
                Route("/empty", _empty, methods=ANY_METHOD),
                Route("/status/{code:int}", _status, methods=ANY_METHOD),
                Route("/redirect", _redirect, methods=ANY_METHOD),
                Route("/loop", _loop),
                Route("/echo", _echo, methods=ANY_METHOD),
                Route("/hang", self._hang),
            ]
        )

    def url(self, path: str, *, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def release(self) -> None:
        """Let every `/hang` request answer."""
        self._release.set()

    async def __aenter__(self) -> Self:
        self._served = Served(self.app)
        await self._served.__aenter__()
        self.port = self._served.port
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._served is not None
        self.release()
        await self._served.stop()

    async def _hang(self, request: Request) -> Response:
        await self._release.wait()
        return PlainTextResponse("released")


async def _text(request: Request) -> Response:
    return PlainTextResponse("hello from the test server")


async def _latin1(request: Request) -> Response:
    return Response("café crème".encode("latin-1"), media_type="text/plain; charset=iso-8859-1")


async def _big(request: Request) -> Response:
    return PlainTextResponse("x" * BIG_BODY_BYTES)


async def _binary(request: Request) -> Response:
    return Response(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 10, media_type="image/png")


async def _empty(request: Request) -> Response:
    return Response(status_code=204)


async def _status(request: Request) -> Response:
    code = request.path_params["code"]
    return PlainTextResponse(f"the server says {code}", status_code=code)


async def _redirect(request: Request) -> Response:
    code = int(request.query_params.get("code", "302"))
    return RedirectResponse(request.query_params["to"], status_code=code)


async def _loop(request: Request) -> Response:
    return RedirectResponse("/loop", status_code=302)


async def _echo(request: Request) -> Response:
    raw = await request.body()
    return JSONResponse(
        {
            "method": request.method,
            "query": dict(request.query_params),
            "json": json.loads(raw) if raw else None,
            "headers": dict(request.headers),
        }
    )
