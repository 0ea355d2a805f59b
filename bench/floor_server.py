"""The floors of the service benchmark: the least a server can spend on finishline's HTTP work.

A minimal FastAPI app with finishline's API shape, served like finishline (uvicorn on a socket
bound by the benchmark, uvloop and httptools) and driven by the same client
(`bench/service_client.py`):

- `POST /runs` (202, `{"id"}`) starts the run as an asyncio task; `GET /runs/{id}/events`
  streams its events as SSE (`id:`, `event:`, `data:` JSON with run_id, seq, type, ts, step,
  payload) from a list in memory, until `run.completed`. No store, no validation beyond
  reading the JSON, no logging, no guards, no limits, no queue.
- **HTTP floor** (no `model_script`): five model calls to the same fake LLM through finishline's
  own client stack (`ModelFactory.create` → `OpenAIChatModel.complete`, so the outbound HTTP
  costs what it costs the service, whatever stack that is), with the same tool specs and
  system prompt, the calculator tool run in between, and the assistant and tool messages
  appended, as the engine sends them.
- **bare SSE loop** (`model_script`: finishline's scripted model, in process): the same loop
  on `ScriptedModel`.

Both stream the number of events the request asks for (`floor_events`, the benchmark passes
what finishline streamed for the same run), spread over the steps, with payloads drawn from
what the step did (the reply's text, the call, the result), so the SSE bytes are comparable.

    python -m uvicorn --factory bench.floor_server:create_app --fd N
    (FINISHLINE_LLM_BASE_URL, FINISHLINE_LLM_MODEL: the fake LLM)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from app.asynclib import asyncio_thread
from app.engine.loop import task_finished_spec
from app.engine.ports import ChatModel, ToolContext, ToolSpec
from app.engine.prompts import BUILTIN
from app.llm.models import ModelFactory
from app.llm.scripted import ScriptedModel
from app.tools.calculator import CalculatorTool

CALCULATOR = CalculatorTool()
SPECS = [
    ToolSpec(CALCULATOR.name, CALCULATOR.description, CALCULATOR.parameters),
    task_finished_spec(BUILTIN["en"]),
]
SYSTEM = f"You are a helpful agent.\n\n{BUILTIN['en'].stop_tool_prompt}"
STEPS = 5
TERMINAL = {b"event: run.completed", b"event: run.failed"}
"""Model turns a run takes (the fake LLM's script): spreads the extra events."""


class _Run:
    __slots__ = ("changed", "frames", "run_id")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.frames: list[bytes] = []
        self.changed = asyncio.Event()

    def emit(self, kind: str, step: int, payload: dict[str, Any]) -> None:
        seq = len(self.frames) + 1
        ts = datetime.now(UTC).isoformat(timespec="milliseconds")
        event = {"run_id": self.run_id, "seq": seq, "type": kind, "ts": ts, "step": step}
        data = json.dumps({**event, **payload}, ensure_ascii=False)
        self.frames.append(f"id: {seq}\nevent: {kind}\ndata: {data}\n\n".encode())
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


async def _execute(run: _Run, model: ChatModel, task: str, events: int) -> None:
    extra = max(0, events - (3 + 3 * (STEPS - 1) + 1))  # beyond the natural ones, spread
    ctx = ToolContext(run_id=run.run_id)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": task},
    ]
    run.emit("run.created", 0, {"task": task})
    run.emit("run.started", 0, {})
    step = 0
    while True:
        step += 1
        reply = await model.complete(messages, SPECS)
        run.emit("step.thought", step, {"content": reply.content})
        for _ in range(extra // STEPS + (1 if step <= extra % STEPS else 0)):
            usage = reply.usage
            run.emit(
                "step.usage",
                step,
                {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
                if usage
                else {},
            )
        calls = reply.tool_calls
        messages.append(
            {
                "role": "assistant",
                "content": reply.content,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for c in calls
                ],
            }
        )
        if not calls or calls[0].name == "task_finished":
            answer = json.loads(calls[0].arguments).get("answer") if calls else reply.content
            run.emit("run.completed", step, {"answer": answer, "reason": "finished"})
            return
        for call in calls:
            arguments = json.loads(call.arguments)
            run.emit("tool.called", step, {"tool": call.name, "arguments": arguments})
            result = await CALCULATOR.call(arguments, ctx)
            run.emit("tool.result", step, {"tool": call.name, "result": result})
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


def _ended(run: _Run, task: asyncio.Task[None], tasks: set[asyncio.Task[None]]) -> None:
    """A run that raised ends with `run.failed` naming the error (the benchmark counts it)."""
    tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        run.emit("run.failed", 0, {"error": repr(task.exception())})


@asynccontextmanager
async def _asyncio_thread(app: FastAPI) -> AsyncIterator[None]:
    with asyncio_thread():
        yield


def create_app() -> FastAPI:
    # no logging: finishline's client logs each call at DEBUG, which the floor filters out
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    app = FastAPI(lifespan=_asyncio_thread)  # as the service's loop thread says (app.asynclib)
    runs: dict[str, _Run] = {}
    tasks: set[asyncio.Task[None]] = set()
    factory = ModelFactory(
        base_url=os.environ.get("FINISHLINE_LLM_BASE_URL"),
        api_key=None,
        default_model=os.environ.get("FINISHLINE_LLM_MODEL", "fake-model"),
    )

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/runs", status_code=202)
    async def start(request: Request) -> dict[str, str]:
        body = json.loads(await request.body())
        run_id = f"run_{secrets.token_hex(8)}"
        run = runs[run_id] = _Run(run_id)
        script = body.get("model_script")
        model = ScriptedModel(script) if script else factory.create(factory.default_model)
        task = asyncio.create_task(_execute(run, model, body["task"], body["floor_events"]))
        tasks.add(task)
        task.add_done_callback(lambda done: _ended(run, done, tasks))
        return {"id": run_id}

    @app.get("/runs/{run_id}/events", response_model=None)
    async def events(run_id: str) -> StreamingResponse | JSONResponse:
        run = runs.get(run_id)
        if run is None:
            return JSONResponse({"error": "no such run"}, status_code=404)

        async def frames() -> AsyncIterator[bytes]:
            sent = 0
            while True:
                changed = run.changed
                if sent < len(run.frames):
                    batch, sent = run.frames[sent:], len(run.frames)
                    for frame in batch:
                        yield frame
                    if batch[-1].split(b"\n", 2)[1] in TERMINAL:
                        runs.pop(run_id, None)
                        return
                else:
                    await changed.wait()

        return StreamingResponse(frames(), media_type="text/event-stream")

    return app
