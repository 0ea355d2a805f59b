"""A finishline run as an A2A task (DESIGN §17): its state, its status message, its answer as
an artifact, its task message in the history, and `metadata.finishline`.

States: queued -> SUBMITTED (WORKING once it has started: a run queued again after a
decision), running -> WORKING, requires_action -> INPUT_REQUIRED (its pending calls in the
status message: a text line and a data part `{"pending_approvals": [...]}`), completed ->
COMPLETED, incomplete -> COMPLETED with the reason in metadata (FAILED when it has no answer),
failed -> FAILED, cancelled -> CANCELED.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types import Artifact, Message, Part, Role, Task, TaskState, TaskStatus
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp

from app.runs.records import RunRecord, RunStatus

A2A_KEY = "a2a"
"""The key of a run's `metadata` where A2A keeps what it needs of the task: its context id and
the id of the message that made it."""
ANSWER = "answer"
"""The id and name of the artifact that holds a run's answer."""
DECISIONS_HELP = (
    'reply on this task with a data part {"decisions": [{"call_id": ..., "approve": true or '
    'false, "message"?: ..., "arguments"?: {...}}]}; a reply of text alone rejects them all, '
    "the text being the reason"
)

TERMINAL_STATES = frozenset(
    {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED}
)


def waiting_on(record: RunRecord) -> frozenset[str]:
    """The calls the run waits on a person's decision for (empty: it waits on none, or is
    decided and about to be queued again)."""
    if record.status != RunStatus.REQUIRES_ACTION or record.approval is None:
        return frozenset()
    return frozenset(p.call_id for p in record.approval.undecided())


def task_state(record: RunRecord) -> TaskState:
    status = record.status
    if status == RunStatus.QUEUED:
        return (
            TaskState.TASK_STATE_SUBMITTED
            if record.started_at is None
            else TaskState.TASK_STATE_WORKING
        )
    if status == RunStatus.REQUIRES_ACTION:
        return (
            TaskState.TASK_STATE_INPUT_REQUIRED
            if waiting_on(record)
            else TaskState.TASK_STATE_WORKING  # decided: about to be queued again
        )
    if status == RunStatus.INCOMPLETE:
        answered = record.result is not None and record.result.answer is not None
        return TaskState.TASK_STATE_COMPLETED if answered else TaskState.TASK_STATE_FAILED
    return {
        RunStatus.RUNNING: TaskState.TASK_STATE_WORKING,
        RunStatus.COMPLETED: TaskState.TASK_STATE_COMPLETED,
        RunStatus.FAILED: TaskState.TASK_STATE_FAILED,
        RunStatus.CANCELLED: TaskState.TASK_STATE_CANCELED,
    }[status]


def state_name(record: RunRecord) -> str:
    """The task's state as the protocol names it: `TASK_STATE_WORKING`."""
    return TaskState.Name(task_state(record))


def a2a_of(record: RunRecord) -> dict[str, Any]:
    """What the run's metadata keeps for A2A (empty for a run made by POST /runs)."""
    value = record.request.metadata.get(A2A_KEY)
    return value if isinstance(value, dict) else {}


def context_of(record: RunRecord) -> str:
    """The task's contextId: the conversation it was made in, else (a run made by POST /runs)
    its own id."""
    context = a2a_of(record).get("context_id")
    return context if isinstance(context, str) and context else record.id


def struct(value: dict[str, Any]) -> Struct:
    message = Struct()
    ParseDict(value, message)
    return message


def timestamp(when: datetime | float) -> Timestamp:
    stamp = Timestamp()
    seconds = when if isinstance(when, float | int) else when.timestamp()
    stamp.FromNanoseconds(int(seconds * 1_000_000_000))
    return stamp


def agent_message(
    record: RunRecord, message_id: str, parts: list[Part], *, role: Any = Role.ROLE_AGENT
) -> Message:
    return Message(
        message_id=message_id,
        role=role,
        parts=parts,
        task_id=record.id,
        context_id=context_of(record),
    )


def calls_message(pending: list[dict[str, Any]]) -> list[Part]:
    """The parts of an INPUT_REQUIRED status message: which calls wait, and how to decide
    them (`pending`: the calls, as a run's `pending_approvals` lists them)."""
    calls = [{k: p[k] for k in ("call_id", "tool", "arguments")} for p in pending]
    named = ", ".join(f"{p['tool']} ({p['call_id']})" for p in calls)
    text = f"Waiting for a person's approval of {len(calls)} tool call(s): {named}; " + (
        DECISIONS_HELP
    )
    return [new_text_part(text), new_data_part({"pending_approvals": calls})]


def pending_message(record: RunRecord, message_id: str) -> Message:
    """The INPUT_REQUIRED status message of a waiting run."""
    assert record.approval is not None
    pending = [p.model_dump(mode="json") for p in record.approval.undecided()]
    return agent_message(record, message_id, calls_message(pending))


def status_message(record: RunRecord) -> Message | None:
    """The message of the run's status as it stands: the pending calls of a waiting run, why a
    run failed or ended without an answer; none otherwise (the answer is an artifact)."""
    if waiting_on(record):
        return pending_message(record, f"{record.id}-waiting")
    if record.error is not None:
        text = f"The run failed ({record.error.type}): {record.error.message}"
        return agent_message(record, f"{record.id}-status", [new_text_part(text)])
    result = record.result
    if record.status == RunStatus.INCOMPLETE and result is not None and result.answer is None:
        text = f"The run ended without an answer: {result.reason.value}"
        return agent_message(record, f"{record.id}-status", [new_text_part(text)])
    return None


def answer_artifact(answer: str | None, output: Any = None) -> Artifact | None:
    """The answer as an artifact: a text part, and the typed `output` (DESIGN §12) as a data
    part when the result has one; None when there is no answer."""
    if answer is None:
        return None
    parts = [new_text_part(answer)]
    if output is not None:
        parts.append(new_data_part(output, media_type="application/json"))
    return Artifact(artifact_id=ANSWER, name=ANSWER, parts=parts)


def finishline_metadata(record: RunRecord) -> dict[str, Any]:
    """`metadata.finishline` of a task: the run it is, how it stands or ended."""
    meta: dict[str, Any] = {
        "run_id": record.id,
        "status": record.status.value,
        "agent": record.request.agent,
        "usage": record.usage.model_dump(mode="json"),
    }
    if record.result is not None:
        meta["reason"] = record.result.reason.value
        meta["degraded"] = record.result.degraded
    if record.error is not None:
        meta["error"] = record.error.model_dump(mode="json")
    if record.previous_run_id is not None:
        meta["previous_run_id"] = record.previous_run_id
    return meta


def task_message(record: RunRecord) -> Message:
    """The message that made the task: its text, as the run's task."""
    message_id = a2a_of(record).get("message_id") or f"{record.id}-task"
    return agent_message(
        record, str(message_id), [new_text_part(record.request.task)], role=Role.ROLE_USER
    )


def task_of(record: RunRecord) -> Task:
    when = record.ended_at or record.started_at or record.created_at
    status = TaskStatus(state=task_state(record), timestamp=timestamp(when))
    message = status_message(record)
    if message is not None:
        status.message.CopyFrom(message)
    result = record.result
    artifact = answer_artifact(result.answer, result.output) if result else None
    return Task(
        id=record.id,
        context_id=context_of(record),
        status=status,
        artifacts=[artifact] if artifact is not None else [],
        history=[task_message(record)],
        metadata=struct({"finishline": finishline_metadata(record)}),
    )
