"""The durable floor: the floor server (`bench/floor_server.py`) plus the durable SQLite
commits a finishline run makes, nothing else (issue #29).

Same API, same client, same model calls and calculator as the floor; what it adds is the
store: finishline's own `SqliteRunStore`, opened as the service opens it (WAL,
`synchronous=FULL`, group commit in its writer thread; the floor uses finishline's client
stack for the same reason: it follows whatever the store does), written with the calls a
5-step run makes, in the same order, at the same commit points (`app/runs/admission.py`,
`app/runs/recorder.py`):

- `POST /runs`: the key's day counts a run (`counters.add_usage`, queued: GET /usage), then
  the record and its `run.queued` in one write (`create(first_event=)`), the answer after it
  commits;
- `run.started` with the running record, queued (`append_soon(record=)`);
- per step: `step.started`, `llm.call` and the call added to the key's day (`add_usage`),
  `thought` queued (`append_soon`), `action` queued (the calculator is idempotent: its call
  waits for no commit); `observation` queued; the step's checkpoint (the engine's state:
  messages and counters, incremental as the store makes it), queued too
  (`save_checkpoint_soon`: nothing waited for before the next model call);
- the end: the terminal record and `run.completed` queued behind the run's writes
  (`append_closing`, against the store's failure count before they began), then everything
  waited for: one commit for the last writes and the end.

Events carry the payloads finishline's do (the same keys), so the bytes stored and streamed
are comparable. An event is streamed only once committed (the store's future resolved), as
finishline's subscribers see them; frames come from memory, not from `store.subscribe`. No
logs, no guards, no validation beyond reading the JSON, no run manager, no engine.

    python -m uvicorn --factory bench.durable_floor:create_app --fd N
    (FINISHLINE_STORE_URL=sqlite:///PATH; FINISHLINE_LLM_BASE_URL, FINISHLINE_LLM_MODEL)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from app.engine.events import EventType
from app.engine.policies import Limits, StopReason
from app.engine.ports import ChatModel, ToolContext
from app.llm.models import ModelFactory
from app.llm.scripted import ScriptedModel
from app.runs.quotas.seam import utc_day
from app.runs.recorder import spent
from app.runs.records import RunRecord, RunResult, RunStatus, Usage, new_run_id, utcnow
from app.runs.spec import RunRequest
from app.runs.store import DayUsage
from app.runs.stores.sqlite import SqliteRunStore
from app.runs.view import settings_dict
from bench.floor_server import CALCULATOR, SPECS, SYSTEM

TERMINAL = {b"event: run.completed", b"event: run.failed"}


class _Run:
    """A run's committed events as SSE frames, in seq order."""

    __slots__ = ("changed", "frames", "held", "run_id")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.frames: list[bytes] = []
        self.held: dict[int, bytes] = {}  # committed out of order (never, with one writer)
        self.changed = asyncio.Event()

    def committed(self, seq: int, kind: str, ts: float, step: int, data: dict[str, Any]) -> None:
        when = datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
        event = {"run_id": self.run_id, "seq": seq, "type": kind, "ts": when, "step": step}
        body = json.dumps({**event, **data}, ensure_ascii=False)
        self.held[seq] = f"id: {seq}\nevent: {kind}\ndata: {body}\n\n".encode()
        while len(self.frames) + 1 in self.held:
            self.frames.append(self.held.pop(len(self.frames) + 1))
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


class _Writer:
    """One run's writes: what the recorder queues and where it waits."""

    def __init__(self, store: SqliteRunStore, run: _Run) -> None:
        self.store = store
        self.run = run
        self.queued: list[Awaitable[Any]] = []
        self.failures: int | None = None  # the store's before the first queued write

    def pending(self) -> list[Awaitable[Any]]:
        """The queued writes, to add the next one to (the failure count noted first)."""
        if self.failures is None:
            self.failures = self.store.write_failures()
        return self.queued

    def _publish(self, future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None:
            e = future.result()
            self.run.committed(e.seq, e.type.value, e.ts, e.step, e.data)

    async def soon(
        self, kind: EventType, step: int, data: dict[str, Any], record: RunRecord | None = None
    ) -> None:
        queued = self.pending()
        future = await self.store.append_soon(self.run.run_id, kind, step, data, record=record)
        asyncio.ensure_future(future).add_done_callback(self._publish)
        queued.append(future)

    async def settle(self) -> None:
        queued, self.queued, self.failures = self.queued, [], None
        for outcome in queued:
            await outcome

    async def close(
        self, kind: EventType, step: int, data: dict[str, Any], record: RunRecord
    ) -> None:
        self.pending()
        assert self.failures is not None
        closing = await self.store.append_closing(
            self.run.run_id, kind, step, data, record=record, failures=self.failures
        )
        await self.settle()
        e = await closing
        self.run.committed(e.seq, e.type.value, e.ts, e.step, e.data)


def _state(messages: list[dict[str, Any]], step: int, usage: Usage) -> dict[str, Any]:
    """The engine's checkpoint state, with the keys it has."""
    return {
        "version": 1,
        "messages": messages,
        "step": step,
        "llm_calls": usage.llm_calls,
        "tool_calls": usage.tool_calls,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cost_usd": 0.0,
        "unpriced_calls": 0,
        "nudges_in_row": 0,
        "elapsed_s": 0.0,
        "call_counts": {},
        "earlier_results": {},
        "elided": [],
        "inherited": 0,
        "plan": [],
        "pending": [],
        "acting": False,
        "model": {"next_reply": step},
    }


async def _execute(
    store: SqliteRunStore, run: _Run, record: RunRecord, model: ChatModel, settings: Limits
) -> None:
    w = _Writer(store, run)
    ctx = ToolContext(run_id=run.run_id)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": record.request.task},
    ]
    usage = record.usage
    record.status, record.started_at = RunStatus.RUNNING, utcnow()
    await w.soon(EventType.RUN_STARTED, 0, {}, record)
    step = 0
    while True:
        step += 1
        await w.soon(EventType.STEP_STARTED, step, {"max_steps": settings.max_steps})
        started = time.monotonic()
        reply = await model.complete(messages, SPECS)
        tokens = reply.usage
        prompt, completion = (tokens.prompt_tokens, tokens.completion_tokens) if tokens else (0, 0)
        usage.steps, usage.llm_calls = step, usage.llm_calls + 1
        usage.prompt_tokens += prompt
        usage.completion_tokens += completion
        usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
        calls = reply.tool_calls
        llm = {
            "model": record.model,
            "duration_ms": round((time.monotonic() - started) * 1000),
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "estimated": tokens is None,
            "tool_calls": len(calls),
            "final": False,
            "cached_tokens": 0,
            "cost_usd": None,
        }
        await w.soon(EventType.LLM_CALL, step, llm)
        w.pending().append(await store.counters.add_usage(None, utc_day(time.time()), spent(llm)))
        if reply.content:
            await w.soon(EventType.THOUGHT, step, {"text": reply.content})
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
        for call in calls:
            arguments = json.loads(call.arguments)
            action = {"call_id": call.id, "tool": call.name, "arguments": arguments}
            await w.soon(EventType.ACTION, step, action)  # idempotent: no wait
            if call.name == "task_finished":
                state = _state(messages, step, usage)
                w.pending().append(await store.save_checkpoint_soon(run.run_id, step, state))
                record.status, record.ended_at = RunStatus.COMPLETED, utcnow()
                answer = arguments.get("answer")
                record.result = RunResult(answer=answer, reason=StopReason.FINISHED, degraded=False)
                ending = {
                    "usage": usage.model_dump(),
                    "result": record.result.model_dump(mode="json"),
                }
                await w.close(EventType.RUN_COMPLETED, step, ending, record)
                return
            result = await CALCULATOR.call(arguments, ctx)
            usage.tool_calls += 1
            observed = {
                "call_id": call.id,
                "tool": call.name,
                "content": result,
                "is_error": False,
                "truncated": False,
                "original_chars": len(result),
                "shown_chars": len(result),
                "duration_ms": 0,
                "repeated": False,
            }
            await w.soon(EventType.OBSERVATION, step, observed)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        state = _state(messages, step, usage)
        w.pending().append(await store.save_checkpoint_soon(run.run_id, step, state))


def _ended(run: _Run, task: asyncio.Task[None], tasks: set[asyncio.Task[None]]) -> None:
    tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        seq = len(run.frames) + len(run.held) + 1
        run.committed(seq, "run.failed", time.time(), 0, {"error": repr(task.exception())})


def create_app() -> FastAPI:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    url = os.environ["FINISHLINE_STORE_URL"]
    if not url.startswith("sqlite:///"):
        raise SystemExit(f"the durable floor needs FINISHLINE_STORE_URL=sqlite:///PATH, not {url}")
    store = SqliteRunStore(url.removeprefix("sqlite:///"))
    settings = Limits()
    runs: dict[str, _Run] = {}
    tasks: set[asyncio.Task[None]] = set()
    factory = ModelFactory(
        base_url=os.environ.get("FINISHLINE_LLM_BASE_URL"),
        api_key=None,
        default_model=os.environ.get("FINISHLINE_LLM_MODEL", "fake-model"),
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await store.open()
        try:
            yield
        finally:
            await store.close()

    app = FastAPI(lifespan=lifespan)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/runs", status_code=202)
    async def start(request: Request) -> dict[str, str]:
        body = json.loads(await request.body())
        script = body.get("model_script")
        model_name = "scripted" if script else factory.default_model
        tools = ["calculator"]
        record = RunRecord(
            id=new_run_id(),
            request=RunRequest(task=body["task"], model=body.get("model"), tools=tools),
            model=model_name,
            settings=settings,
        )
        run = runs[record.id] = _Run(record.id)
        queued = {
            "task": record.request.task,
            "model": model_name,
            "tools": tools,
            "settings": settings_dict(settings),
        }
        counted = await store.counters.add_usage(None, utc_day(time.time()), DayUsage(runs=1))
        first = await store.create(record, first_event=(EventType.RUN_QUEUED, 0, queued))
        await counted
        assert first is not None
        run.committed(first.seq, first.type.value, first.ts, first.step, first.data)
        model = ScriptedModel(script) if script else factory.create(model_name)
        task = asyncio.create_task(_execute(store, run, record, model, settings))
        tasks.add(task)
        task.add_done_callback(lambda done: _ended(run, done, tasks))
        return {"id": record.id}

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
