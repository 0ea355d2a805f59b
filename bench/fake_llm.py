"""The fake OpenAI-compatible server of the service benchmarks, in a process of its own.

`tests.fakes.llm_server.FakeLLMServer` (the suite's fake: real HTTP on 127.0.0.1, uvicorn, a
socket with TCP_NODELAY and a 4,096-connection listen backlog, so a "0 ms" call takes well
under a millisecond and a hundred clients connecting at once are queued, not reset) with
`latency_s` added to every answer and a handler that scripts a run of `--steps` model turns
from the conversation it is sent: turn n (n assistant messages so far) calls the calculator
with "n+1", the last turn calls task_finished, or, for a client that offers no
task_finished (LangGraph's agent, the floor), answers "done" without a tool call. When the
request offers `calculator_http` (a request-declared HTTP tool), the calls go to it instead.

It also serves that HTTP tool: `POST /tool/calculator` with `{"expression": "a+b"}` answers
`{"result": "<sum>"}` at once (no added latency). It forgets each request once answered (the
suite's server keeps them for assertions).

    python -m bench.fake_llm --latency-ms 50 --steps 5      # prints "port N", serves until
                                                            # stdin closes or SIGTERM
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

from tests.fakes.llm_server import FakeLLMServer, FakeReply

HTTP_TOOL = "calculator_http"
TOOL_PATH = "/tool/calculator"


def reply_for(body: dict[str, Any], steps: int) -> FakeReply:
    turn = sum(1 for m in body.get("messages", ()) if m.get("role") == "assistant")
    offered = {tool.get("function", {}).get("name") for tool in body.get("tools", ())}
    if turn < steps - 1:
        name = HTTP_TOOL if HTTP_TOOL in offered else "calculator"
        return FakeReply.call(
            name, {"expression": f"{turn}+1"}, content=f"Step {turn + 1}: computing."
        )
    if "task_finished" in offered:
        return FakeReply.finish("done")
    return FakeReply(content="done")


def calculate(raw: bytes) -> bytes:
    expression = str(json.loads(raw or b"{}").get("expression", "0"))
    total = sum(int(term) for term in expression.split("+"))
    return json.dumps({"result": str(total)}).encode()


class _BenchLLM(FakeLLMServer):
    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == TOOL_PATH:
            chunks = []
            while True:
                message = await receive()
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    break
            body = calculate(b"".join(chunks))
            headers = [(b"content-type", b"application/json")]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await super()._app(scope, receive, send)
        self.received.clear()


async def serve(latency_s: float, steps: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not sys.stdin.read(1) else None)
    async with _BenchLLM(handler=lambda body: reply_for(body, steps), latency_s=latency_s) as llm:
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
