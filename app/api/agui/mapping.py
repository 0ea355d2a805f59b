"""finishline's events as AG-UI events (DESIGN §16), as the protocol's JSON objects
(`app.api.agui.wire`: what ag-ui-protocol's models serialize to, byte for byte).

`FrameMapper` follows one AG-UI stream of one finishline run: `started()` opens it, `map(event)`
turns each finishline event into the AG-UI events it stands for (none, one or several, all
carrying that event's seq as their SSE id), and the stream ends with the frames of the run's
terminal event, or with `interrupted(record)` when the run waits for a person or the client.

What maps to what:
- lifecycle: `RUN_STARTED` (the client's threadId/runId) first; a terminal event ends the stream
  with `RUN_FINISHED` (outcome success for completed and incomplete runs, cancelled for a
  cancelled one; `result` {run_id, answer, output, reason, degraded, status}; `usage`) or
  `RUN_ERROR` {code, message} for a failed run. A run waiting for decisions or a client tool's
  result ends it with `RUN_FINISHED {outcome: interrupt}`.
- `step.started` → `STEP_STARTED` (the step before it `STEP_FINISHED`), named "step N".
- `thought` → a reasoning message (`REASONING_START`, `REASONING_MESSAGE_START/CONTENT/END`,
  `REASONING_END`); with token streaming, each `token` is a `REASONING_MESSAGE_CONTENT` delta
  of the step's reasoning message, which its `thought` closes.
- `action` → `TOOL_CALL_START/ARGS/END`; `observation` → `TOOL_CALL_RESULT` (the finish tool's
  own call and the rejections of it are `CUSTOM`: its answer is the assistant message).
- the answer → an assistant `TEXT_MESSAGE_START/CONTENT/END`, before `RUN_FINISHED`.
- `agent.started` / `agent.finished` (sub-agents, once the runs layer emits them) →
  `SUBAGENT_STARTED` / `SUBAGENT_FINISHED` (`SUBAGENT_ERROR` for a child that failed).
- everything else (interventions, retries, usage per LLM call, approvals, steering messages,
  recoveries, run.queued/run.started) → `CUSTOM` named `finishline.<type>`, its value the
  event's payload with `run_id` and `seq`.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from app.api.agui import wire
from app.api.agui.wire import Wire, frame
from app.engine.events import EventType
from app.engine.prompts import TASK_FINISHED
from app.runs.records import Event, RunRecord, RunStatus

__all__ = ["FrameMapper", "Wire", "frame"]

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "description": "true: the call runs."},
        "message": {"type": "string", "description": "For the model: why, or a note."},
        "arguments": {"type": "object", "description": "Run it with these arguments instead."},
    },
    "required": ["approve"],
}
"""The `resume[].payload` an approval interrupt takes (`responseSchema`)."""
CLIENT_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"result": {"description": "The tool's result (text, or JSON)."}},
    "required": ["result"],
}
"""A client tool's interrupt: its result as a `tool` message, or as `resume[].payload.result`."""
SUBAGENT_FAILED = ("failed", "cancelled")
ENDED_STATUS = {
    EventType.RUN_COMPLETED: RunStatus.COMPLETED,
    EventType.RUN_INCOMPLETE: RunStatus.INCOMPLETE,
}


class FrameMapper:
    """The AG-UI events of one stream of one finishline run. Keeps what the protocol needs
    open and closed in order: the current step and the reasoning message tokens stream into."""

    def __init__(self, *, thread_id: str, run_id: str, finishline_run_id: str) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        """The client's runId (this stream), not finishline's."""
        self.finishline_run_id = finishline_run_id
        self.model: str | None = None
        self._step: str | None = None
        self._reasoning: str | None = None  # the message tokens stream into
        self._ids = finishline_run_id + "-"  # message ids: the run id, then the seq

    # -- the stream's ends --------------------------------------------------------------------

    def started(self) -> list[Wire]:
        metadata = {"finishline": {"run_id": self.finishline_run_id}}
        return [wire.run_started(self.thread_id, self.run_id, metadata)]

    def interrupted(self, record: RunRecord, waited: Event | None = None) -> list[Wire]:
        """The run waits for decisions (approvals) or results (client tools): the stream ends
        with an interrupt per call it waits on (those its `run.waiting` event lists, when
        given, else the record's undecided ones), each answered by the client's next run."""
        client = {t.name for t in record.request.client_tools}
        timeout = timedelta(seconds=record.settings.approval_timeout_s)
        if waited is not None:
            pending = list(waited.data.get("pending", []))
        elif record.approval is not None:
            pending = [p.model_dump(mode="json") for p in record.approval.undecided()]
        else:
            pending = []
        interrupts: list[Wire] = []
        for call in pending:  # undecided past it: the timeout rejects them (DESIGN §9)
            began = datetime.fromisoformat(call["requested_at"])
            shown = json.dumps(call["arguments"], ensure_ascii=False)
            is_client = call["tool"] in client
            interrupts.append(
                wire.interrupt(
                    call["call_id"],
                    message=(
                        f"{call['tool']} runs in the client: send its result"
                        if is_client
                        else f"Approve {call['tool']}({shown})?"
                    ),
                    response_schema=CLIENT_TOOL_SCHEMA if is_client else APPROVAL_SCHEMA,
                    expires_at=(began + timeout).isoformat(),
                    metadata={
                        "finishline": {
                            "run_id": record.id,
                            "tool": call["tool"],
                            "arguments": call["arguments"],
                            "kind": "client_tool" if is_client else "approval",
                        }
                    },
                )
            )
        out = self._close()
        out.append(
            wire.run_finished(
                self.thread_id,
                self.run_id,
                result={"run_id": record.id, "status": RunStatus.REQUIRES_ACTION.value},
                outcome={"type": "interrupt", "interrupts": interrupts},
            )
        )
        return out

    # -- each finishline event ----------------------------------------------------------------

    def frames(self, events: list[Event]) -> bytes:
        """The SSE frames of `events`, in order: `map` of each, with its seq as their `id`."""
        return b"".join([frame(e.seq, self.map(e)) for e in events])

    def map(self, event: Event) -> list[Wire]:
        """The AG-UI events `event` stands for, in order."""
        kind: str = event.type  # (a type the runs layer may add: sub-agents' agent.*)
        data = event.data
        ts = int(event.ts * 1000)
        if kind == EventType.TOKEN:
            return self._token(data["delta"], event.seq, ts)
        if kind == EventType.LLM_CALL:  # a streamed reply's tokens come before it: keep open
            self.model = data.get("model", self.model)
            return [self._custom(event, ts)]
        out = self._close_reasoning(ts) if kind != EventType.THOUGHT else []
        if kind == EventType.STEP_STARTED:
            out += self._close_step(ts)
            self._step = f"step {event.step}"
            out.append(wire.step(wire.STEP_STARTED, self._step, ts))
        elif kind == EventType.THOUGHT:
            out += self._thought(data["text"], event.seq, ts)
        elif kind == EventType.ACTION and data["tool"] != TASK_FINISHED:
            arguments = data["arguments"]
            delta = arguments if isinstance(arguments, str) else json.dumps(arguments)
            parent = f"{self.finishline_run_id}-step-{event.step}"
            out += wire.tool_call(data["call_id"], data["tool"], parent, delta, ts)
        elif kind == EventType.OBSERVATION and data["tool"] != TASK_FINISHED:
            out.append(
                wire.tool_call_result(
                    f"{self._ids}{event.seq}",
                    data["call_id"],
                    data["content"],
                    {"finishline": {"is_error": data.get("is_error", False)}},
                    ts,
                )
            )
        elif kind == "agent.started":
            out.append(
                wire.subagent_started(_subagent_run(data), data["agent"], data.get("call_id"), ts)
            )
        elif kind == "agent.finished":
            out.append(self._subagent_finished(data, ts))
        elif event.terminal:
            out += self._ended(event, ts)
        else:
            out.append(self._custom(event, ts))
        return out

    # -- parts --------------------------------------------------------------------------------

    def _custom(self, event: Event, ts: int) -> Wire:
        value = {"run_id": event.run_id, "seq": event.seq, "step": event.step, **event.data}
        return wire.custom(f"finishline.{event.type}", value, ts)

    def _token(self, delta: str, seq: int, ts: int) -> list[Wire]:
        out: list[Wire] = []
        if self._reasoning is None:
            self._reasoning = f"{self._ids}{seq}"
            out += [
                wire.message(wire.REASONING_START, self._reasoning, ts),
                wire.reasoning_message_start(self._reasoning, ts),
            ]
        if delta:
            out.append(wire.reasoning_content(self._reasoning, delta, ts))
        return out

    def _thought(self, text: str, seq: int, ts: int) -> list[Wire]:
        if self._reasoning is not None:  # its tokens came first: the thought closes it
            return self._close_reasoning(ts)
        message_id = f"{self._ids}{seq}"
        return [
            wire.message(wire.REASONING_START, message_id, ts),
            wire.reasoning_message_start(message_id, ts),
            wire.reasoning_content(message_id, text, ts),
            wire.message(wire.REASONING_MESSAGE_END, message_id, ts),
            wire.message(wire.REASONING_END, message_id, ts),
        ]

    def _close_reasoning(self, ts: int | None = None) -> list[Wire]:
        message_id, self._reasoning = self._reasoning, None
        if message_id is None:
            return []
        return [
            wire.message(wire.REASONING_MESSAGE_END, message_id, ts),
            wire.message(wire.REASONING_END, message_id, ts),
        ]

    def _close_step(self, ts: int | None = None) -> list[Wire]:
        step, self._step = self._step, None
        return [] if step is None else [wire.step(wire.STEP_FINISHED, step, ts)]

    def _close(self, ts: int | None = None) -> list[Wire]:
        return self._close_reasoning(ts) + self._close_step(ts)

    def _subagent_finished(self, data: dict[str, Any], ts: int) -> Wire:
        child = _subagent_run(data)
        status, reason = data.get("status"), data.get("reason")
        if status in SUBAGENT_FAILED:
            message = f"{data['agent']} {status}" + (f" ({reason})" if reason else "")
            return wire.subagent_error(child, message, reason or status, ts)
        result = {"run_id": child, "status": status, "reason": reason}
        return wire.subagent_finished(child, result, ts)

    def _usage(self, usage: dict[str, Any]) -> list[Wire]:
        return [
            wire.token_usage(
                self.model,
                usage.get("prompt_tokens", 0),
                usage.get("completion_tokens", 0),
                usage.get("total_tokens", 0),
            )
        ]

    def _ended(self, event: Event, ts: int) -> list[Wire]:
        out = self._close_step(ts)
        data = event.data
        usage = self._usage(data.get("usage") or {})
        if event.type == EventType.RUN_FAILED:
            error = data.get("error") or {}
            message = error.get("message") or "the run failed"
            out.append(wire.run_error(message, error.get("type"), ts))
            return out
        result = data.get("result") or {}
        status = ENDED_STATUS.get(EventType(event.type), RunStatus.CANCELLED)
        answer = result.get("answer")
        if answer:
            out += wire.text_message(f"{self._ids}answer", answer, ts)
        out.append(
            wire.run_finished(
                self.thread_id,
                self.run_id,
                result={
                    "run_id": self.finishline_run_id,
                    "answer": answer,
                    "output": result.get("output"),
                    "reason": result.get("reason", "cancelled"),
                    "degraded": result.get("degraded", False),
                    "status": status.value,
                },
                outcome={"type": "cancelled" if status == RunStatus.CANCELLED else "success"},
                usage=usage,
                ts=ts,
            )
        )
        return out


def _subagent_run(data: dict[str, Any]) -> str:
    """The sub-agent invocation's id: its child run's, or, for a remote A2A agent (which has
    no run here), its call's."""
    child = data.get("child_run_id")
    return str(child) if child else f"remote:{data.get('call_id')}"
