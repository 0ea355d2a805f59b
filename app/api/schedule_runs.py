"""A schedule's run body, read as POST /runs reads its own (`app.api.runbody.run_body`, the
one function): the body model, the caps, the thread's rules, and the names it uses (tools,
model, agent profile) checked by the assembly. Every refusal names the field where the
schedule holds it (`run.settings.max_steps`). Used when a schedule is made or changed, and
at each firing (a body a changed server no longer accepts is a firing of outcome invalid)."""

from __future__ import annotations

import json
from typing import Any

from fastapi.exceptions import RequestValidationError

from app.api.errors import validation_problems
from app.api.runbody import relocated, run_body
from app.assembly import RunAssembly
from app.runs.errors import InvalidRunError
from app.runs.schedules.service import ReadRun, ScheduledRun
from app.settings import Settings


def in_run(field: str) -> str:
    """Where a schedule holds a POST /runs field."""
    return "run" if field == "body" else f"run.{field}"


def schedule_run_reader(settings: Settings, assembly: RunAssembly) -> ReadRun:
    async def read(run: dict[str, Any]) -> ScheduledRun:
        if run.get("stream"):
            raise InvalidRunError("run.stream", "a schedule's run has no client to stream to")
        try:
            size = len(json.dumps(run, ensure_ascii=False))
            body, request = await run_body(run, settings, size=size, where=in_run)
        except RequestValidationError as exc:
            problems = validation_problems(exc)
            first = problems[0] if problems else {"field": "run", "message": "invalid"}
            raise InvalidRunError(first["field"], first["message"], errors=problems) from None
        try:
            body.check_thread()
            await assembly.check(request)
        except InvalidRunError as exc:
            raise relocated(exc, in_run) from None
        return ScheduledRun(request, body.thread_id, body.multitask)

    return read
