"""Instructions per SSE stream, in process: what `EventStream` (app/api/sse.py: sse-starlette's
`EventSourceResponse` as finishline uses it) costs for one stream of `--writes` writes, the
stream's source and client as cheap as they can be (a queue; a `send` that takes every write at
once; a `receive` that waits for the end). Each variant runs in processes of its own under
valgrind's callgrind, once with no stream and once with `--streams`: the difference over the
streams, C code included, start-up and imports left out.

Variants:
- `as-used`: the service's streams (a keep-alive every 15 s, a 30 s send timeout).
- `no-send-timeout`, `no-keep-alive`: sse-starlette's public options (`send_timeout=None`,
  `ping=0`), measured to know their price; not used: the service promises both.
- `what-if-*`: sse-starlette's internals replaced in that process only, to size the changes
  proposed upstream (docs/decisions.md, "SSE through sse-starlette"): `plain-send` (no cancel
  scope around a write), `asyncio-timeout` (asyncio's own timeout around a write),
  `no-exit-task` (no task per stream waiting for the server's exit), `ping-in-listener` (the
  keep-alive sent by the disconnect listener when `receive` waits past the interval, not by a
  task of its own), `asyncio-native` (asyncio's task group and timeouts instead of anyio's),
  `proposal` (plain-send's timeout as one deadline per stream, no-exit-task and
  ping-in-listener together).

    python -m bench.sse_stream [--writes 12] [--streams 200] [--root DIR] [VARIANT ...]

`--root`: the source tree whose `app.api.sse` is measured (another checkout, to compare).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import math
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from bench.common import ROOT

VARIANTS = (
    "as-used",
    "no-send-timeout",
    "no-keep-alive",
    "what-if-plain-send",
    "what-if-asyncio-timeout",
    "what-if-no-exit-task",
    "what-if-ping-in-listener",
    "what-if-asyncio-native",
    "what-if-proposal",
)
SCOPE = {"type": "http", "method": "GET"}
FRAME = b'id: 1\r\nevent: thought\r\ndata: {"text": "x"}\r\n\r\n'
PING = b": ping\r\n\r\n"


def patch(variant: str) -> None:
    """Replace sse-starlette's internals for a `what-if` variant, in this process only."""
    import anyio
    import sse_starlette.sse as sse
    from sse_starlette.sse import EventSourceResponse, SendTimeoutError

    esr: Any = EventSourceResponse
    if variant in ("what-if-plain-send",):

        async def plain(self: Any, send: Any, message: Any) -> None:
            await send(message)

        esr._send_with_timeout = plain
    if variant in ("what-if-asyncio-timeout", "what-if-asyncio-native"):

        async def timed(self: Any, send: Any, message: Any) -> None:
            try:
                async with asyncio.timeout(self.send_timeout):
                    await send(message)
            except TimeoutError:
                raise SendTimeoutError() from None

        esr._send_with_timeout = timed
    if variant in ("what-if-no-exit-task", "what-if-proposal"):
        source = textwrap.dedent(inspect.getsource(esr.__call__))
        source, found = re.subn(
            r"task_group\.start_soon\(\s*cancel_on_finish,"
            r" self\._listen_for_exit_signal_with_grace\s*\)",
            "pass",
            source,
        )
        assert found == 1, "sse-starlette's __call__ changed: update the what-if variants"
        space = dict(vars(sse))
        exec(source, space)  # the library's own method, one task left out
        esr.__call__ = space["__call__"]
    if variant in ("what-if-ping-in-listener", "what-if-proposal"):
        start = esr.__call__

        async def listen(self: Any, receive: Any) -> None:
            while self.active:
                with anyio.move_on_after(self._every):
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        self.active = False
                        if self.client_close_handler_callable:
                            await self.client_close_handler_callable(message)
                        break
                    continue
                body = {"type": "http.response.body", "body": PING, "more_body": True}
                await self._send_with_timeout(self._sending, body)

        async def call(self: Any, scope: Any, receive: Any, send: Any) -> None:
            self._sending, self._every, self.ping_interval = send, self.ping_interval, 0
            await start(self, scope, receive, send)

        esr._listen_for_disconnect = listen
        esr.__call__ = call
    if variant == "what-if-proposal":
        streaming = esr._stream_response

        async def stream(self: Any, send: Any) -> None:
            with anyio.CancelScope() as scope:
                self._deadline, self._writer = scope, asyncio.current_task()
                await streaming(self, send)
            if scope.cancelled_caught:
                raise SendTimeoutError()

        async def write(self: Any, send: Any, message: Any) -> None:
            if asyncio.current_task() is not self._writer:  # a keep-alive
                with anyio.move_on_after(self.send_timeout):
                    await send(message)
                return
            self._deadline.deadline = anyio.current_time() + self.send_timeout
            await send(message)
            self._deadline.deadline = math.inf

        esr._stream_response = stream
        esr._send_with_timeout = write
    if variant == "what-if-asyncio-native":

        async def ping(self: Any, send: Any) -> None:
            while self.active:
                await asyncio.sleep(self.ping_interval)
                body = {"type": "http.response.body", "body": PING, "more_body": True}
                await self._send_with_timeout(send, body)

        async def call_native(self: Any, scope: Any, receive: Any, send: Any) -> None:
            tasks: list[asyncio.Task[None]] = []

            async def first(work: Any) -> None:
                try:
                    await work
                finally:
                    for task in tasks:
                        if task is not asyncio.current_task():
                            task.cancel()

            try:
                async with asyncio.TaskGroup() as group:
                    tasks.append(group.create_task(first(self._stream_response(send))))
                    tasks.append(group.create_task(first(self._ping(send))))
                    exiting = self._listen_for_exit_signal_with_grace()
                    tasks.append(group.create_task(first(exiting)))
                    tasks.append(group.create_task(first(self._listen_for_disconnect(receive))))
            except* asyncio.CancelledError:
                pass

        esr._ping = ping
        esr.__call__ = call_native


async def one_stream(variant: str, writes: int) -> None:
    from app.api.sse import EventStream

    queue: asyncio.Queue[bytes] = asyncio.Queue()

    async def frames() -> Any:
        for _ in range(writes):
            yield await queue.get()

    gone = asyncio.Event()
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        await gone.wait()
        return {"type": "http.disconnect"}

    options: dict[str, Any] = {"ping_s": 15, "send_timeout_s": 30}
    if "grace_s" in inspect.signature(EventStream).parameters:
        options["grace_s"] = 30
    response: Any = EventStream(frames(), **options)
    if variant == "no-send-timeout":
        response.send_timeout = None
    if variant == "no-keep-alive":
        response.ping_interval = 0
    answering = asyncio.create_task(response(SCOPE, receive, send))
    for _ in range(writes):
        await asyncio.sleep(0)  # as a run's events come: a turn of the loop apart
        queue.put_nowait(FRAME)
        await asyncio.sleep(0)
    await answering
    assert len(sent) == writes + 2, sent


def child(variant: str, streams: int, writes: int) -> None:
    import uvloop

    if variant.startswith("what-if-"):
        patch(variant)

    async def main() -> None:
        for _ in range(3 + streams):  # 3 to warm up (imports, first calls)
            await one_stream(variant, writes)

    uvloop.run(main())


def count(root: Path, variant: str, streams: int, writes: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        command = [
            *("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"),
            *(sys.executable, str(Path(__file__).resolve()), "--child", variant),
            *("--streams", str(streams), "--writes", str(writes)),
        ]
        path = f"{root}:{ROOT}" if root != ROOT else str(ROOT)
        done = subprocess.run(
            command, cwd=root, env={"PYTHONPATH": path}, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"{variant}: {done.stderr[-2000:]}")
        for line in out.read_text(errors="replace").splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise ValueError("no totals in callgrind's output")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="*", help=f"of {', '.join(VARIANTS)}; as-used if none")
    parser.add_argument("--writes", type=int, default=12)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.streams, args.writes)
        return
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        parser.error(f"no variant {', '.join(sorted(unknown))}: {', '.join(VARIANTS)}")
    for variant in args.variants or ["as-used"]:
        none = count(args.root, variant, 0, args.writes)
        some = count(args.root, variant, args.streams, args.writes)
        per = (some - none) / args.streams
        print(f"{variant}: {per / 1000:,.0f} k instructions per stream of {args.writes} writes")


if __name__ == "__main__":
    main()
