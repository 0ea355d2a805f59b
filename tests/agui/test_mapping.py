"""The mapping of DESIGN §16, event by event: what each finishline event becomes in AG-UI,
every produced event checked with the protocol's own models (app/api/agui/mapping.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.api.agui.mapping import FrameMapper, frame
from app.engine.events import EventType
from app.runs.records import ApprovalState, Event, PendingApproval, RunRecord, RunStatus
from tests.agui.kit import protocol_event
from tests.test_architecture import imported_modules

RUN = "run_01TESTTESTTESTTESTTESTTEST"
USAGE = {"steps": 1, "llm_calls": 1, "tool_calls": 0}
USAGE |= {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def event(seq: int, type_: str, step: int = 1, **data: Any) -> Event:
    """A finishline event; `type_` may be one the runs layer does not emit yet (agent.*)."""
    return Event(RUN, seq, type_, 1_700_000_000.5, step, data)  # type: ignore[arg-type]


def mapper() -> FrameMapper:
    return FrameMapper(thread_id="t", run_id="client-run", finishline_run_id=RUN)


def dumped(events: list[Any]) -> list[dict[str, Any]]:
    out = [e.model_dump(mode="json", by_alias=True) for e in events]
    for data in out:
        protocol_event(data)
    return out


def kinds(events: list[Any]) -> list[str]:
    return [e["type"] for e in dumped(events)]


def test_the_stream_opens_with_the_clients_ids_and_names_the_finishline_run() -> None:
    (started,) = dumped(mapper().started())
    assert started["type"] == "RUN_STARTED"
    assert (started["threadId"], started["runId"]) == ("t", "client-run")
    assert started["protocolVersion"] == "1.0"
    assert started["metadata"] == {"finishline": {"run_id": RUN}}


def test_steps_open_and_close_in_order() -> None:
    m = mapper()
    first = dumped(m.map(event(3, EventType.STEP_STARTED, step=1, max_steps=10)))
    second = dumped(m.map(event(9, EventType.STEP_STARTED, step=2, max_steps=10)))
    assert first == [{"type": "STEP_STARTED", "timestamp": 1_700_000_000_500, "stepName": "step 1"}]
    assert [(e["type"], e["stepName"]) for e in second] == [
        ("STEP_FINISHED", "step 1"),
        ("STEP_STARTED", "step 2"),
    ]


def test_a_thought_is_a_whole_reasoning_message() -> None:
    out = dumped(mapper().map(event(5, EventType.THOUGHT, text="let me think")))
    assert [e["type"] for e in out] == [
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
    ]
    assert out[2]["delta"] == "let me think"
    assert {e["messageId"] for e in out} == {f"{RUN}-5"}


def test_tokens_are_deltas_of_the_reasoning_message_their_thought_closes() -> None:
    m = mapper()
    first = dumped(m.map(event(4, EventType.TOKEN, delta="let ")))
    more = dumped(m.map(event(5, EventType.TOKEN, delta="me")))
    call = dumped(m.map(event(6, EventType.LLM_CALL, model="gpt", prompt_tokens=1)))
    thought = dumped(m.map(event(7, EventType.THOUGHT, text="let me")))
    assert [e["type"] for e in first] == [
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
    ]
    assert [e["type"] for e in more] == ["REASONING_MESSAGE_CONTENT"]
    assert [e["delta"] for e in first[2:] + more] == ["let ", "me"]
    assert [e["type"] for e in call] == ["CUSTOM"]  # the call's usage: the message stays open
    assert [e["type"] for e in thought] == ["REASONING_MESSAGE_END", "REASONING_END"]
    assert {e["messageId"] for e in first + more + thought} == {f"{RUN}-4"}


def test_a_retry_closes_the_reasoning_its_failed_attempt_streamed() -> None:
    m = mapper()
    m.map(event(4, EventType.TOKEN, delta="half a rep"))
    out = kinds(m.map(event(5, EventType.LLM_RETRY, attempt=1, error="503", delay_s=1.0)))
    assert out == ["REASONING_MESSAGE_END", "REASONING_END", "CUSTOM"]


def test_an_action_is_a_tool_call_and_its_observation_the_result() -> None:
    m = mapper()
    arguments = {"expression": "6*7"}
    call = dumped(m.map(event(6, "action", call_id="c1", tool="calculator", arguments=arguments)))
    observed = {"call_id": "c1", "tool": "calculator", "content": "42", "is_error": True}
    result = dumped(m.map(event(7, EventType.OBSERVATION, **observed)))
    assert [e["type"] for e in call] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    assert call[0]["toolCallName"] == "calculator"
    assert call[0]["parentMessageId"] == f"{RUN}-step-1"
    assert json.loads(call[1]["delta"]) == arguments
    assert {e["toolCallId"] for e in call} == {"c1"}
    (tool_result,) = result
    assert tool_result["type"] == "TOOL_CALL_RESULT"
    assert (tool_result["toolCallId"], tool_result["content"]) == ("c1", "42")
    assert tool_result["messageId"] == f"{RUN}-7"
    assert tool_result["metadata"] == {"finishline": {"is_error": True}}


def test_the_finish_tool_is_no_tool_call_of_the_client() -> None:
    m = mapper()
    call = dumped(m.map(event(6, "action", call_id="c", tool="task_finished", arguments={})))
    rejected = dumped(
        m.map(event(7, EventType.OBSERVATION, call_id="c", tool="task_finished", content="no"))
    )
    assert [(e["type"], e["name"]) for e in call + rejected] == [
        ("CUSTOM", "finishline.action"),
        ("CUSTOM", "finishline.observation"),
    ]


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        (EventType.INTERVENTION, {"kind": "stop_prompt", "message": "finish"}),
        (EventType.LLM_RETRY, {"attempt": 1, "error": "503", "delay_s": 0.5}),
        (EventType.LLM_CALL, {"model": "m", "prompt_tokens": 3, "completion_tokens": 2}),
        (EventType.USER_MESSAGE, {"content": "use SI units", "delivered": True}),
        (EventType.APPROVAL_REQUESTED, {"call_id": "c", "tool": "t", "arguments": {}}),
        (EventType.APPROVAL_DECIDED, {"call_id": "c", "approved": True, "message": None}),
        (EventType.RUN_RECOVERED, {"replica": "r2", "attempt": 1}),
        (EventType.RUN_QUEUED, {"task": "t"}),
        (EventType.RUN_STARTED, {}),
    ],
)
def test_the_rest_is_custom_named_after_the_finishline_event(kind: str, data: Any) -> None:
    (custom,) = dumped(mapper().map(event(8, kind, step=2, **data)))
    assert custom["type"] == "CUSTOM"
    assert custom["name"] == f"finishline.{kind}"
    assert custom["value"] == {"run_id": RUN, "seq": 8, "step": 2, **data}


def test_a_completed_run_ends_with_its_answer_and_result() -> None:
    m = mapper()
    m.map(event(1, EventType.STEP_STARTED, max_steps=3))
    m.map(event(2, EventType.LLM_CALL, model="gpt-x"))
    result = {"answer": "42", "output": {"n": 42}, "reason": "finished", "degraded": False}
    out = dumped(m.map(event(3, EventType.RUN_COMPLETED, result=result, usage=USAGE)))
    assert [e["type"] for e in out] == [
        "STEP_FINISHED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert out[1]["role"] == "assistant"
    assert out[2]["delta"] == "42"
    finished = out[-1]
    assert finished["outcome"] == {"type": "success"}
    assert finished["result"] == {"run_id": RUN, "status": "completed", **result}
    assert (finished["threadId"], finished["runId"]) == ("t", "client-run")
    assert finished["usage"] == [
        {"model": "gpt-x", "inputTokens": 10, "outputTokens": 5, "totalTokens": 15}
    ]


def test_an_incomplete_run_without_an_answer_finishes_with_its_reason() -> None:
    result = {"answer": None, "reason": "max_steps", "degraded": False}  # no `output`: tolerated
    out = dumped(mapper().map(event(3, EventType.RUN_INCOMPLETE, result=result, usage=USAGE)))
    assert [e["type"] for e in out] == ["RUN_FINISHED"]
    assert out[0]["result"] == {
        "run_id": RUN,
        "answer": None,
        "output": None,
        "reason": "max_steps",
        "degraded": False,
        "status": "incomplete",
    }


def test_a_failed_run_is_a_run_error() -> None:
    m = mapper()
    m.map(event(1, EventType.STEP_STARTED, max_steps=3))
    m.map(event(2, EventType.TOKEN, delta="partial"))
    error = {"type": "llm_status", "message": "the model answered 500"}
    out = dumped(m.map(event(3, EventType.RUN_FAILED, error=error, usage=USAGE)))
    assert [e["type"] for e in out] == [
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "STEP_FINISHED",
        "RUN_ERROR",
    ]
    assert (out[-1]["code"], out[-1]["message"]) == ("llm_status", "the model answered 500")


def test_a_cancelled_run_finishes_with_the_cancelled_outcome() -> None:
    (finished,) = dumped(mapper().map(event(3, EventType.RUN_CANCELLED, usage=USAGE)))
    assert finished["type"] == "RUN_FINISHED"
    assert finished["outcome"] == {"type": "cancelled"}
    assert finished["result"]["status"] == "cancelled"
    assert finished["result"]["run_id"] == RUN


def test_sub_agents_are_the_protocols_sub_agent_events() -> None:
    m = mapper()
    child = "run_01CHILDCHILDCHILDCHILDCHI"
    started = dumped(m.map(event(4, "agent.started", call_id="c", agent="res", child_run_id=child)))
    done = {"call_id": "c", "agent": "res", "child_run_id": child}
    finished = dumped(
        m.map(event(9, "agent.finished", status="completed", reason="finished", **done))
    )
    failed = dumped(m.map(event(12, "agent.finished", status="failed", reason="error", **done)))
    assert started == [
        {
            "type": "SUBAGENT_STARTED",
            "timestamp": 1_700_000_000_500,
            "subagentRunId": child,
            "name": "res",
            "parentToolCallId": "c",
        }
    ]
    assert finished[0]["type"] == "SUBAGENT_FINISHED"
    assert finished[0]["result"] == {"run_id": child, "status": "completed", "reason": "finished"}
    assert failed[0]["type"] == "SUBAGENT_ERROR"
    assert failed[0]["code"] == "error"


def test_a_remote_sub_agent_is_named_by_its_call() -> None:
    m = mapper()
    remote = {"call_id": "c7", "agent": "billing", "child_run_id": None}
    (started,) = dumped(m.map(event(4, "agent.started", **remote)))
    (finished,) = dumped(
        m.map(event(5, "agent.finished", status="completed", reason="finished", **remote))
    )
    assert started["subagentRunId"] == finished["subagentRunId"] == "remote:c7"
    assert started["parentToolCallId"] == "c7"


def waiting_record(*calls: tuple[str, str], client_tools: tuple[str, ...] = ()) -> RunRecord:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return RunRecord.model_validate(
        {
            "id": RUN,
            "status": RunStatus.REQUIRES_ACTION,
            "request": {
                "task": "t",
                "client_tools": [{"name": n, "description": "d"} for n in client_tools],
            },
            "model": "scripted",
            "settings": {},
            "approval": ApprovalState(
                pending=[
                    PendingApproval(call_id=c, tool=t, arguments={"x": 1}, requested_at=now)
                    for c, t in calls
                ],
                waiting_since=now,
            ),
        }
    )


def test_a_wait_ends_the_stream_with_an_interrupt_per_undecided_call() -> None:
    m = mapper()
    m.map(event(1, EventType.STEP_STARTED, max_steps=3))
    calls = (("c1", "send_mail"), ("c2", "pick_color"))
    record = waiting_record(*calls, client_tools=("pick_color",))
    out = dumped(m.interrupted(record))
    assert [e["type"] for e in out] == ["STEP_FINISHED", "RUN_FINISHED"]
    finished = out[-1]
    assert finished["result"] == {"run_id": RUN, "status": "requires_action"}
    assert finished["outcome"]["type"] == "interrupt"
    approval, client = finished["outcome"]["interrupts"]
    assert (approval["id"], approval["toolCallId"], approval["reason"]) == ("c1", "c1", "tool_call")
    assert approval["message"] == 'Approve send_mail({"x": 1})?'
    assert approval["responseSchema"]["required"] == ["approve"]
    assert approval["expiresAt"] == "2026-01-01T01:00:00+00:00"  # approval_timeout_s: 3600
    assert approval["metadata"]["finishline"]["kind"] == "approval"
    assert client["id"] == "c2"
    assert client["metadata"]["finishline"] == {
        "run_id": RUN,
        "tool": "pick_color",
        "arguments": {"x": 1},
        "kind": "client_tool",
    }


def test_every_frame_carries_the_seq_of_its_finishline_event() -> None:
    events = mapper().map(event(6, "action", call_id="c1", tool="calculator", arguments={}))
    text = frame(6, events)
    blocks = [b for b in text.split("\n\n") if b]
    assert len(blocks) == 3
    for block, made in zip(blocks, events, strict=True):
        id_line, data_line = block.split("\n")
        assert id_line == "id: 6"
        assert json.loads(data_line.removeprefix("data: ")) == made.model_dump(
            mode="json", by_alias=True
        )


def test_the_mapping_knows_nothing_of_http() -> None:
    module = Path(__file__).resolve().parents[2] / "app" / "api" / "agui" / "mapping.py"
    found = {m.split(".")[0] for m in imported_modules(module)}
    assert not found & {"fastapi", "starlette", "sse_starlette", "uvicorn"}
