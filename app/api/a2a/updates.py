"""finishline's events as A2A stream updates (DESIGN §17), each with `metadata.finishline
{seq, type}` (the event's seq and type; several updates made from one event carry its seq).

Thoughts, tool calls and their results, interventions, grader verdicts, retries, steering
messages and decisions are WORKING status updates whose message says what happened: a text part and,
where the event has structure, a data part with its fields. The answer is an artifact update
(a text part; the typed `output` as a data part), then the terminal status. A run's wait
(`run.waiting`) ends the stream with its INPUT_REQUIRED status (`waiting`), not a WORKING
update. `run.queued` (the task's first state, SUBMITTED, is in the Task that opens every
stream), `step.started`, `token` and `llm.call` are not sent: they stay in the run's event log.
"""

from __future__ import annotations

import json
from typing import Any

from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types import (
    Message,
    Part,
    Role,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from app.api.a2a.tasks import answer_artifact, calls_message, struct, timestamp
from app.engine.events import EventType
from app.runs.records import Event

Update = TaskStatusUpdateEvent | TaskArtifactUpdateEvent

NOT_SENT = frozenset(
    {
        EventType.RUN_QUEUED,
        EventType.STEP_STARTED,
        EventType.TOKEN,
        EventType.LLM_CALL,
        EventType.RUN_WAITING,  # the stream's end: `UpdateMapper.waiting`
    }
)
"""Events `map` makes no update of (they stay in the run's event log)."""
ARGUMENTS_SHOWN = 500
"""How much of a call's arguments its status line shows (the data part has them whole)."""


def _json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= ARGUMENTS_SHOWN else text[:ARGUMENTS_SHOWN] + "…"


def _fields(data: dict[str, Any], *names: str) -> dict[str, Any]:
    return {name: data[name] for name in names if name in data}


def _said(event: Event) -> tuple[str | None, dict[str, Any] | None]:
    """The status message of a WORKING update: its text line and data part, by event type."""
    data = event.data
    match event.type:
        case EventType.RUN_STARTED:
            return None, None
        case EventType.THOUGHT:
            return str(data.get("text", "")), None
        case EventType.ACTION:
            line = f"Calling {data['tool']}({_json(data.get('arguments', {}))})"
            return line, _fields(data, "call_id", "tool", "arguments")
        case EventType.OBSERVATION:
            fields = _fields(
                data, "call_id", "tool", "is_error", "truncated", "original_chars", "repeated"
            )
            return str(data.get("content", "")), fields
        case EventType.AGENT_STARTED:
            run = data.get("child_run_id") or "remote"
            line = f"Sub-agent {data.get('agent')} started (run {run})"
            return line, _fields(data, "call_id", "agent", "child_run_id")
        case EventType.AGENT_FINISHED:
            line = f"Sub-agent {data.get('agent')} {data.get('status')} ({data.get('reason')})"
            return line, _fields(data, "call_id", "agent", "child_run_id", "status", "reason")
        case EventType.INTERVENTION:
            return str(data.get("message", "")), _fields(data, "kind")
        case EventType.OUTCOME_GRADED:
            met = "met" if data.get("satisfied") else "not met"
            line = f"The grader: rubric {met}. {data.get('feedback', '')}".rstrip()
            return line, _fields(data, "satisfied", "feedback", "revision", "final", "valid")
        case EventType.LLM_RETRY:
            line = (
                f"The LLM call failed ({data.get('error')}); retry {data.get('attempt')} in "
                f"{data.get('delay_s')} s"
            )
            return line, _fields(data, "attempt", "error", "delay_s")
        case EventType.USER_MESSAGE:
            return str(data.get("content", "")), _fields(data, "delivered")
        case EventType.APPROVAL_REQUESTED:
            line = f"{data['tool']} ({data['call_id']}) waits for a person's approval"
            return line, _fields(data, "call_id", "tool", "arguments")
        case EventType.APPROVAL_DECIDED:
            verdict = "approved" if data.get("approved") else "rejected"
            note = f": {data['message']}" if data.get("message") else ""
            line = f"Call {data['call_id']} {verdict}{note}"
            return line, _fields(data, "call_id", "approved", "message", "arguments")
        case EventType.RUN_RECOVERED:
            line = f"Taken over by replica {data.get('replica')} (attempt {data.get('attempt')})"
            return line, _fields(data, "replica", "attempt")
        case _:  # a type this module does not know yet: its payload, as it is
            return str(event.type), dict(data)


class UpdateMapper:
    """The updates of one task's stream."""

    def __init__(self, task_id: str, context_id: str) -> None:
        self.task_id = task_id
        self.context_id = context_id

    def _meta(self, event: Event, **extra: Any) -> Any:
        return struct({"finishline": {"seq": event.seq, "type": str(event.type), **extra}})

    def _message(self, message_id: str, parts: list[Part], role: Any = Role.ROLE_AGENT) -> Message:
        return Message(
            message_id=message_id,
            role=role,
            parts=parts,
            task_id=self.task_id,
            context_id=self.context_id,
        )

    def _status(
        self, event: Event, state: Any, message: Message | None = None, **extra: Any
    ) -> TaskStatusUpdateEvent:
        status = TaskStatus(state=state, timestamp=timestamp(event.ts))
        if message is not None:
            status.message.CopyFrom(message)
        return TaskStatusUpdateEvent(
            task_id=self.task_id,
            context_id=self.context_id,
            status=status,
            metadata=self._meta(event, **extra),
        )

    def map(self, event: Event) -> list[Update]:
        """The updates one event makes (none for the events in `NOT_SENT`)."""
        if event.type in NOT_SENT:
            return []
        if event.terminal:
            return self._ended(event)
        text, data = _said(event)
        parts = [new_text_part(text)] if text else []
        if data is not None:
            parts.append(new_data_part(data))
        role = Role.ROLE_USER if event.type == EventType.USER_MESSAGE else Role.ROLE_AGENT
        message = self._message(f"{self.task_id}-{event.seq}", parts, role) if parts else None
        return [self._status(event, TaskState.TASK_STATE_WORKING, message)]

    def _ended(self, event: Event) -> list[Update]:
        """The final updates; the status's metadata also carries the run's usage, its reason
        and whether the answer is degraded (or its error)."""
        data = event.data
        usage = data.get("usage") or {}
        if event.type == EventType.RUN_CANCELLED:
            return [self._status(event, TaskState.TASK_STATE_CANCELED, usage=usage)]
        if event.type == EventType.RUN_FAILED:
            error = data.get("error") or {}
            text = f"The run failed ({error.get('type')}): {error.get('message')}"
            message = self._message(f"{self.task_id}-{event.seq}", [new_text_part(text)])
            return [
                self._status(event, TaskState.TASK_STATE_FAILED, message, error=error, usage=usage)
            ]
        result = data["result"]
        extra = {"reason": result["reason"], "degraded": result["degraded"], "usage": usage}
        artifact = answer_artifact(result.get("answer"), result.get("output"))
        if artifact is None:  # incomplete, with no answer
            text = f"The run ended without an answer: {result['reason']}"
            message = self._message(f"{self.task_id}-{event.seq}", [new_text_part(text)])
            return [self._status(event, TaskState.TASK_STATE_FAILED, message, **extra)]
        update = TaskArtifactUpdateEvent(
            task_id=self.task_id,
            context_id=self.context_id,
            artifact=artifact,
            last_chunk=True,
            metadata=self._meta(event),
        )
        return [update, self._status(event, TaskState.TASK_STATE_COMPLETED, **extra)]

    def waiting(self, waited: Event) -> TaskStatusUpdateEvent:
        """The INPUT_REQUIRED update of a run that waits for a person: its `run.waiting`, the
        calls it waits on in the status message."""
        message = self._message(
            f"{self.task_id}-waiting-{waited.seq}", calls_message(waited.data.get("pending", []))
        )
        status = TaskStatus(
            state=TaskState.TASK_STATE_INPUT_REQUIRED,
            message=message,
            timestamp=timestamp(waited.ts),
        )
        return TaskStatusUpdateEvent(
            task_id=self.task_id,
            context_id=self.context_id,
            status=status,
            metadata=self._meta(waited),
        )
