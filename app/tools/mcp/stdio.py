"""A stdio MCP server: the child process, and its messages read line by line under a cap.

The SDK's stdio transport joins a long line in quadratic time and holds all of it: a 50 MB
answer took a server out for 40 s and more. This transport reads the child's stdout with
`framing.LineFramer`: a line past `max_message_bytes` is dropped as it arrives (never held
whole, read through at the pipe's speed), and the request it answers, found by its id at
the start or the end of the line, gets the `unread.too_large` error: that call fails, the
session and every other call go on. A dropped line whose request cannot be told is logged;
its call waits for its own timeout.

The rest is the SDK's contract for stdio: the command in a session of its own (so the
whole process tree can be stopped), the SDK's safe inherited environment plus `env`,
stderr passed through, messages as JSON lines. A child that ends its output ends the
session at once (the supervisor reconnects). Leaving closes stdin, gives the child
`EXIT_GRACE_S` to exit, then terminates its process group (SIGTERM, SIGKILL).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import structlog
from anyio.abc import AsyncResource, Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage
from mcp_types import (
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)

from app.engine.errors import FinishlineError
from app.tools.mcp import unread
from app.tools.mcp.config import McpStdioServer
from app.tools.mcp.framing import Dropped, LineFramer

log = structlog.get_logger("finishline.mcp")

EXIT_GRACE_S = 2.0
"""How long a child whose stdin closed may take to exit before its group is terminated."""
_FLUSH_S = 0.5
"""How long leaving waits for messages already accepted to be written."""
CANCELLED = "notifications/cancelled"


Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]
"""What a transport gives the SDK's session: messages from the server, messages to it."""


class ServerOutputEndedError(FinishlineError):
    """The child closed its stdout (it exited, or will not answer again)."""


@asynccontextmanager
async def stdio_transport(
    name: str, config: McpStdioServer, *, max_message_bytes: int
) -> AsyncIterator[Streams]:
    """The SDK's `Transport` for the stdio server `config`, as an async context manager."""
    process = await anyio.open_process(
        config.command,
        env=get_default_environment() | config.env,
        cwd=config.cwd,
        stderr=sys.stderr,
        start_new_session=True,
    )
    to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_server, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    pending: set[int | str] = set()
    """Ids of our requests not answered yet: a dropped line may answer only one of them."""
    leaving = False
    written = anyio.Event()

    async def read() -> None:
        assert process.stdout is not None
        framer = LineFramer(max_message_bytes)
        try:
            async with to_session:
                async for chunk in process.stdout:
                    for line in framer.feed(chunk):
                        message = _answer_to(line, pending, name, max_message_bytes)
                        if message is not None:
                            await to_session.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            # leaving: keep the pipe flowing, so a child still writing can see stdin close
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                async for _ in process.stdout:
                    pass
            return
        if not leaving:
            raise ServerOutputEndedError("the server process closed its stdout")

    async def write() -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for item in from_session:
                    message = item.message
                    if isinstance(message, JSONRPCRequest):
                        pending.add(message.id)
                    elif isinstance(message, JSONRPCNotification) and message.method == CANCELLED:
                        pending.discard((message.params or {}).get("requestId"))
                    data = message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()  # the session sees the connection end
        finally:
            written.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        tasks.start_soon(write)
        try:
            yield from_server, to_server
        finally:
            leaving = True
            with anyio.CancelScope(shield=True):
                from_server.close()
                to_server.close()
                with anyio.move_on_after(_FLUSH_S):
                    await written.wait()
                await _stop(process)
                for stream in (from_server, to_server, to_session, from_session):
                    await stream.aclose()
            tasks.cancel_scope.cancel()


def _answer_to(
    line: bytes | Dropped, pending: set[int | str], server: str, cap: int
) -> SessionMessage | Exception | None:
    """What the session gets for one line: the message, a parse error, the error of the
    request a dropped line answered, or nothing for a dropped line of no known request."""
    if isinstance(line, Dropped):
        request_id = line.request_id()
        if request_id is None or request_id not in pending:
            log.warning("mcp_message_dropped", server=server, bytes=line.size, cap=cap)
            return None
        pending.discard(request_id)
        return SessionMessage(unread.too_large(request_id, cap))
    try:
        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        return exc
    if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id is not None:
        pending.discard(message.id)
    return SessionMessage(message)


async def _stop(process: Process) -> None:
    """Close stdin, wait `EXIT_GRACE_S`, then terminate the process group."""
    assert process.stdin is not None
    assert process.stdout is not None
    await _close(process.stdin)
    with anyio.move_on_after(EXIT_GRACE_S):
        await process.wait()
    if process.returncode is None:
        await terminate_posix_process_tree(process)
    await _close(process.stdout)


async def _close(stream: AsyncResource) -> None:
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.aclose()
