"""The fake OpenAI-compatible server of the service benchmark, in a process of its own.

`tests.fakes.llm_server.FakeLLMServer` (the suite's fake: real HTTP on 127.0.0.1, uvicorn)
with `latency_s` added to every answer and a handler that scripts a run of `--steps` model
turns from the conversation it is sent: turn n (n assistant messages so far) calls the
calculator with "n+1", the last turn calls task_finished. It forgets each request once
answered (the suite's server keeps them for assertions).

    python -m bench.fake_llm --latency-ms 50 --steps 5      # prints "port N", serves until
                                                            # stdin closes or SIGTERM
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

from tests.fakes.llm_server import FakeLLMServer, FakeReply


def reply_for(body: dict[str, Any], steps: int) -> FakeReply:
    turn = sum(1 for m in body.get("messages", ()) if m.get("role") == "assistant")
    if turn < steps - 1:
        return FakeReply.call(
            "calculator", {"expression": f"{turn}+1"}, content=f"Step {turn + 1}: computing."
        )
    return FakeReply.finish("done")


class _Forgetful(FakeLLMServer):
    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await super()._app(scope, receive, send)
        self.received.clear()


async def serve(latency_s: float, steps: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not sys.stdin.read(1) else None)
    async with _Forgetful(handler=lambda body: reply_for(body, steps), latency_s=latency_s) as llm:
        print(f"port {llm.port}", flush=True)
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.run(serve(args.latency_ms / 1000, args.steps))
    except ImportError:
        asyncio.run(serve(args.latency_ms / 1000, args.steps))


if __name__ == "__main__":
    main()
