"""The mapping of finishline's events to A2A updates is total and deliberate: every event type
is either left out on purpose, terminal, or said in a status message of its own; a type this
code has not met yet (another branch's) still reaches the client, as its payload."""

from __future__ import annotations

import pytest
from a2a.types import TaskState
from google.protobuf.json_format import MessageToDict

from app.api.a2a.updates import NOT_SENT, UpdateMapper
from app.engine.events import TERMINAL_EVENT_TYPES, EventType
from app.runs.records import Event

PAYLOADS = {
    EventType.RUN_STARTED: {},
    EventType.THOUGHT: {"text": "hmm"},
    EventType.ACTION: {"call_id": "c1", "tool": "calculator", "arguments": {"expression": "1"}},
    EventType.OBSERVATION: {
        "call_id": "c1",
        "tool": "calculator",
        "content": "1",
        "is_error": False,
    },
    EventType.INTERVENTION: {"kind": "stop_prompt", "message": "Are you done?"},
    EventType.OUTCOME_GRADED: {
        "satisfied": False,
        "feedback": "name a colour",
        "revision": 0,
        "final": False,
        "valid": True,
    },
    EventType.LLM_RETRY: {"attempt": 1, "error": "timeout", "delay_s": 0.5},
    EventType.USER_MESSAGE: {"content": "Use SI units.", "delivered": True},
    EventType.APPROVAL_REQUESTED: {"call_id": "c1", "tool": "calculator", "arguments": {}},
    EventType.APPROVAL_DECIDED: {"call_id": "c1", "approved": True, "message": None},
    EventType.RUN_RECOVERED: {"replica": "r2", "attempt": 1},
    EventType.AGENT_STARTED: {"call_id": "c1", "agent": "helper", "child_run_id": "run_2"},
    EventType.AGENT_FINISHED: {
        "call_id": "c1",
        "agent": "helper",
        "child_run_id": "run_2",
        "status": "completed",
        "reason": "finished",
    },
}


def mapped(kind: str, data: dict[str, object]) -> list[object]:
    event = Event(run_id="run_1", seq=7, type=kind, ts=1.0, step=1, data=data)
    return UpdateMapper("run_1", "ctx").map(event)


def test_every_event_type_is_left_out_terminal_or_said_on_purpose() -> None:
    decided = NOT_SENT | TERMINAL_EVENT_TYPES | set(PAYLOADS)
    assert set(EventType) == decided


@pytest.mark.parametrize("kind", sorted(PAYLOADS))
def test_each_said_event_is_a_working_update_with_its_seq_and_type(kind: EventType) -> None:
    (update,) = mapped(kind, PAYLOADS[kind])
    assert update.status.state == TaskState.TASK_STATE_WORKING
    meta = MessageToDict(update.metadata)["finishline"]
    assert meta == {"seq": 7, "type": str(kind)}
    parts = MessageToDict(update.status)["message"]["parts"] if PAYLOADS[kind] else []
    assert all(p.get("text") != str(kind) for p in parts)  # not the catch-all


@pytest.mark.parametrize("kind", sorted(NOT_SENT))
def test_events_left_out_make_no_update(kind: EventType) -> None:
    assert mapped(kind, {}) == []


def test_a_type_not_known_here_reaches_the_client_as_its_payload() -> None:
    (update,) = mapped("agent.handed_off", {"agent": "helper", "child_run_id": "run_2"})
    message = MessageToDict(update.status)["message"]
    assert message["parts"][0] == {"text": "agent.handed_off"}
    assert message["parts"][1]["data"] == {"agent": "helper", "child_run_id": "run_2"}


def test_a_typed_answer_is_a_data_part_beside_its_text() -> None:
    result = {
        "answer": '{"total": 5}',
        "output": {"total": 5},
        "reason": "finished",
        "degraded": False,
    }
    artifact, status = mapped("run.completed", {"result": result, "usage": {}})
    parts = MessageToDict(artifact.artifact)["parts"]
    assert parts[0] == {"text": '{"total": 5}'}
    assert parts[1] == {"data": {"total": 5.0}, "mediaType": "application/json"}
    assert status.status.state == TaskState.TASK_STATE_COMPLETED


def test_a_result_without_a_typed_answer_is_text_alone() -> None:
    result = {"answer": "5", "reason": "finished", "degraded": False}
    artifact, _ = mapped("run.completed", {"result": result, "usage": {}})
    assert MessageToDict(artifact.artifact)["parts"] == [{"text": "5"}]
