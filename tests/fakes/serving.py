"""Serve an ASGI app with uvicorn inside the current event loop, for tests.

    async with Served(app) as server:          # lifespan="off" by default
        server.url("/path")                    # http://127.0.0.1:PORT/path

The server speaks uvicorn's h11 protocol (or httptools) with the service's deadline on a
request's headers (app/api/protocols.py; `header_timeout_s`).

The socket is bound to 127.0.0.1:0 and listening before `serve()`, so there is no start-up
race and no sleep; entering waits for start-up on an event under a bound. The socket says
IPPROTO_TCP so asyncio turns TCP_NODELAY on (else every response waits ~40 ms on Nagle and
delayed ACK), and it listens with a large backlog (`LISTEN_BACKLOG`) so a burst of clients
is queued, not reset. No signal handlers: the test runner owns SIGINT. No logging config: uvicorn
leaves the process's loggers alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any, Literal, Self

import anyio
import uvicorn

from app.api.protocols import H11HeaderTimeout, HttpToolsHeaderTimeout, with_header_timeout

LISTEN_BACKLOG = 4096
"""Connections the kernel queues before accept (capped by net.core.somaxconn): with a short
queue, a hundred clients connecting at once see resets (benchmarks, load tests)."""


def loopback_socket(backlog: int = LISTEN_BACKLOG, port: int = 0) -> socket.socket:
    """A TCP socket listening on 127.0.0.1 at a free port (or `port`, to serve again on
    the port of a stopped server), for a server to take over.

    TCP_NODELAY is set on it because Linux hands it to every accepted connection, and a
    server given the socket with `uvicorn --fd` takes it for AF_UNIX and never sets it
    itself: every small write would wait ~40 ms on Nagle and delayed ACKs.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # lets a server stopped with connections open be served again on its port
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


class _Server(uvicorn.Server):
    """uvicorn.Server that reports start-up and exits on events, not flags and ticks."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()
        self._exit = asyncio.Event()

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
        return contextlib.nullcontext()

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().serve(sockets=sockets)
        finally:
            self.ready.set()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        finally:
            self.ready.set()

    async def main_loop(self) -> None:
        await self.on_tick(0)
        await self._exit.wait()

    def request_exit(self) -> None:
        self.should_exit = True
        self._exit.set()


class Served:
    def __init__(
        self,
        app: Any,
        *,
        lifespan: Literal["on", "off"] = "off",
        timeout_graceful_shutdown: float = 5,
        start_timeout_s: float = 10,
        port: int = 0,
        header_timeout_s: float = 10.0,
        httptools: bool = False,
        send_buffer: int | None = None,
    ) -> None:
        """`send_buffer`: SO_SNDBUF of the listening socket, which the connections it accepts
        inherit (Linux): a small one makes a client that stops reading block the server's
        writes after a few kilobytes, not megabytes."""
        self.app = app
        self.port = port
        self._send_buffer = send_buffer
        base = HttpToolsHeaderTimeout if httptools else H11HeaderTimeout
        self._protocol = with_header_timeout(base, header_timeout_s)
        self._lifespan = lifespan
        self._grace = timeout_graceful_shutdown
        self._start_timeout_s = start_timeout_s
        self._server: _Server | None = None
        self._serving: asyncio.Task[None] | None = None

    def url(self, path: str = "", *, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    async def __aenter__(self) -> Self:
        sock = loopback_socket(port=self.port)
        try:
            self.port = sock.getsockname()[1]
            if self._send_buffer is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)
            config = uvicorn.Config(
                self.app,
                interface="asgi3",
                http=self._protocol,
                ws="none",
                lifespan=self._lifespan,
                log_config=None,
                proxy_headers=False,
                server_header=False,
                date_header=False,
                timeout_graceful_shutdown=self._grace,
            )
            self._server = _Server(config)
            self._serving = asyncio.create_task(self._server.serve(sockets=[sock]))
        except BaseException:
            sock.close()
            raise
        try:
            with anyio.fail_after(self._start_timeout_s):
                await self._server.ready.wait()
        except BaseException:
            await self.stop()
            raise
        if not self._server.started:
            await asyncio.wait([self._serving])
            self._server = None
            raise RuntimeError(f"the server did not start: {self._serving!r}")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        if self._server is None or self._serving is None:
            return
        self._server.request_exit()
        try:
            with anyio.fail_after(self._grace + 10):
                await self._serving
        finally:
            if not self._serving.done():
                self._serving.cancel()
                await asyncio.wait([self._serving])
            self._server = None
