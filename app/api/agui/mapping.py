"""finishline's events as AG-UI events (DESIGN §16), built with the protocol's own models.

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
from datetime import timedelta
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    CustomEvent,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder

from app.engine.events import EventType
from app.engine.prompts import TASK_FINISHED
from app.runs.records import Event, RunRecord, RunStatus

ENCODER = EventEncoder()
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


def frame(seq: int, events: list[BaseEvent]) -> str:
    """The SSE frames of `events`, each with the finishline seq they came from as `id`, in the
    protocol encoder's own encoding."""
    return "".join(f"id: {seq}\n{ENCODER.encode(event)}" for event in events)


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

    # -- the stream's ends --------------------------------------------------------------------

    def started(self) -> list[BaseEvent]:
        return [
            RunStartedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                protocol_version=PROTOCOL_VERSION,
                metadata={"finishline": {"run_id": self.finishline_run_id}},
            )
        ]

    def interrupted(self, record: RunRecord) -> list[BaseEvent]:
        """The run waits for decisions (approvals) or results (client tools): the stream ends
        with an interrupt per undecided call, each answered by the client's next run."""
        approval = record.approval
        pending = approval.undecided() if approval is not None else []
        client = {t.name for t in record.request.client_tools}
        expires = None  # then the approval timeout rejects what is undecided (DESIGN §9)
        if approval is not None:
            timeout = timedelta(seconds=record.settings.approval_timeout_s)
            expires = (approval.waiting_since + timeout).isoformat()
        interrupts = []
        for call in pending:
            shown = json.dumps(call.arguments, ensure_ascii=False)
            is_client = call.tool in client
            interrupts.append(
                Interrupt(
                    id=call.call_id,
                    reason="tool_call",
                    tool_call_id=call.call_id,
                    message=(
                        f"{call.tool} runs in the client: send its result"
                        if is_client
                        else f"Approve {call.tool}({shown})?"
                    ),
                    response_schema=CLIENT_TOOL_SCHEMA if is_client else APPROVAL_SCHEMA,
                    expires_at=expires,
                    metadata={
                        "finishline": {
                            "run_id": record.id,
                            "tool": call.tool,
                            "arguments": call.arguments,
                            "kind": "client_tool" if is_client else "approval",
                        }
                    },
                )
            )
        out = self._close()
        out.append(
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                outcome=RunFinishedInterruptOutcome(interrupts=interrupts),
                result={"run_id": record.id, "status": RunStatus.REQUIRES_ACTION.value},
            )
        )
        return out

    # -- each finishline event ----------------------------------------------------------------

    def map(self, event: Event) -> list[BaseEvent]:
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
            out.append(StepStartedEvent(step_name=self._step, timestamp=ts))
        elif kind == EventType.THOUGHT:
            out += self._thought(data["text"], event.seq, ts)
        elif kind == EventType.ACTION and data["tool"] != TASK_FINISHED:
            call_id = data["call_id"]
            parent = f"{self.finishline_run_id}-step-{event.step}"
            arguments = data["arguments"]
            delta = arguments if isinstance(arguments, str) else json.dumps(arguments)
            out += [
                ToolCallStartEvent(
                    tool_call_id=call_id,
                    tool_call_name=data["tool"],
                    parent_message_id=parent,
                    timestamp=ts,
                ),
                ToolCallArgsEvent(tool_call_id=call_id, delta=delta, timestamp=ts),
                ToolCallEndEvent(tool_call_id=call_id, timestamp=ts),
            ]
        elif kind == EventType.OBSERVATION and data["tool"] != TASK_FINISHED:
            out.append(
                ToolCallResultEvent(
                    message_id=f"{self.finishline_run_id}-{event.seq}",
                    tool_call_id=data["call_id"],
                    content=data["content"],
                    role="tool",
                    timestamp=ts,
                    metadata={"finishline": {"is_error": data.get("is_error", False)}},
                )
            )
        elif kind == "agent.started":
            out.append(
                SubagentStartedEvent(
                    subagent_run_id=_subagent_run(data),
                    name=data["agent"],
                    parent_tool_call_id=data.get("call_id"),
                    timestamp=ts,
                )
            )
        elif kind == "agent.finished":
            out.append(self._subagent_finished(data, ts))
        elif event.terminal:
            out += self._ended(event, ts)
        else:
            out.append(self._custom(event, ts))
        return out

    # -- parts --------------------------------------------------------------------------------

    def _custom(self, event: Event, ts: int) -> CustomEvent:
        value = {"run_id": event.run_id, "seq": event.seq, "step": event.step, **event.data}
        return CustomEvent(name=f"finishline.{event.type}", value=value, timestamp=ts)

    def _token(self, delta: str, seq: int, ts: int) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        if self._reasoning is None:
            self._reasoning = f"{self.finishline_run_id}-{seq}"
            out += [
                ReasoningStartEvent(message_id=self._reasoning, timestamp=ts),
                ReasoningMessageStartEvent(message_id=self._reasoning, timestamp=ts),
            ]
        if delta:
            out.append(
                ReasoningMessageContentEvent(message_id=self._reasoning, delta=delta, timestamp=ts)
            )
        return out

    def _thought(self, text: str, seq: int, ts: int) -> list[BaseEvent]:
        if self._reasoning is not None:  # its tokens came first: the thought closes it
            return self._close_reasoning(ts)
        message_id = f"{self.finishline_run_id}-{seq}"
        return [
            ReasoningStartEvent(message_id=message_id, timestamp=ts),
            ReasoningMessageStartEvent(message_id=message_id, timestamp=ts),
            ReasoningMessageContentEvent(message_id=message_id, delta=text, timestamp=ts),
            ReasoningMessageEndEvent(message_id=message_id, timestamp=ts),
            ReasoningEndEvent(message_id=message_id, timestamp=ts),
        ]

    def _close_reasoning(self, ts: int | None = None) -> list[BaseEvent]:
        message_id, self._reasoning = self._reasoning, None
        if message_id is None:
            return []
        return [
            ReasoningMessageEndEvent(message_id=message_id, timestamp=ts),
            ReasoningEndEvent(message_id=message_id, timestamp=ts),
        ]

    def _close_step(self, ts: int | None = None) -> list[BaseEvent]:
        step, self._step = self._step, None
        return [] if step is None else [StepFinishedEvent(step_name=step, timestamp=ts)]

    def _close(self, ts: int | None = None) -> list[BaseEvent]:
        return self._close_reasoning(ts) + self._close_step(ts)

    def _subagent_finished(self, data: dict[str, Any], ts: int) -> BaseEvent:
        child = _subagent_run(data)
        status, reason = data.get("status"), data.get("reason")
        if status in SUBAGENT_FAILED:
            message = f"{data['agent']} {status}" + (f" ({reason})" if reason else "")
            return SubagentErrorEvent(
                subagent_run_id=child, message=message, code=reason or status, timestamp=ts
            )
        result = {"run_id": child, "status": status, "reason": reason}
        return SubagentFinishedEvent(subagent_run_id=child, result=result, timestamp=ts)

    def _usage(self, usage: dict[str, Any]) -> list[TokenUsage]:
        return [
            TokenUsage(
                model=self.model,
                input_tokens=usage.get("prompt_tokens", 0),
                output_tokens=usage.get("completion_tokens", 0),
                total_tokens=usage.get("total_tokens", 0),
            )
        ]

    def _ended(self, event: Event, ts: int) -> list[BaseEvent]:
        out = self._close_step(ts)
        data = event.data
        usage = self._usage(data.get("usage") or {})
        if event.type == EventType.RUN_FAILED:
            error = data.get("error") or {}
            message = error.get("message") or "the run failed"
            out.append(RunErrorEvent(message=message, code=error.get("type"), timestamp=ts))
            return out
        result = data.get("result") or {}
        status = {
            EventType.RUN_COMPLETED: RunStatus.COMPLETED,
            EventType.RUN_INCOMPLETE: RunStatus.INCOMPLETE,
        }.get(EventType(event.type), RunStatus.CANCELLED)
        answer = result.get("answer")
        if answer:
            message_id = f"{self.finishline_run_id}-answer"
            out += [
                TextMessageStartEvent(message_id=message_id, role="assistant", timestamp=ts),
                TextMessageContentEvent(message_id=message_id, delta=answer, timestamp=ts),
                TextMessageEndEvent(message_id=message_id, timestamp=ts),
            ]
        outcome: RunFinishedSuccessOutcome | RunFinishedCancelledOutcome = (
            RunFinishedCancelledOutcome()
            if status == RunStatus.CANCELLED
            else RunFinishedSuccessOutcome()
        )
        out.append(
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                outcome=outcome,
                result={
                    "run_id": self.finishline_run_id,
                    "answer": answer,
                    "output": result.get("output"),
                    "reason": result.get("reason", "cancelled"),
                    "degraded": result.get("degraded", False),
                    "status": status.value,
                },
                usage=usage,
                timestamp=ts,
            )
        )
        return out


def _subagent_run(data: dict[str, Any]) -> str:
    """The sub-agent invocation's id: its child run's, or, for a remote A2A agent (which has
    no run here), its call's."""
    child = data.get("child_run_id")
    return str(child) if child else f"remote:{data.get('call_id')}"
