"""The frames are ag-ui-protocol's own, byte for byte (app/api/agui/wire.py): every event the
mapping makes, of every type and shape, is read by the package's models and written again by
its `EventEncoder`, and the bytes must be the ones finishline sent."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from ag_ui.core import EventType as AguiType
from ag_ui.encoder import EventEncoder

from app.api.agui.mapping import FrameMapper, Wire, frame
from app.engine.events import EventType
from app.runs.records import ApprovalState, Event, PendingApproval, RunRecord, RunStatus
from tests.agui.kit import protocol_event

RUN = "run_01WIREWIREWIREWIREWIREWIR"
TRICKY = 'quote " backslash \\ nl \n cr \r tab \t nul \x00 esc \x1b del \x7f é 中 🙂 \u2028 \u0085'
"""Text JSON escapes, and text it leaves as it is."""
NUMBERS = {
    "floats": [0.1, 1e-07, 1e16, 1.5e300, -0.0, 2.5, 1 / 3],
    "not_finite": [float("inf"), float("-inf"), float("nan")],
    "ints": [0, -1, 2**53, 2**63 - 1],
    "nested": {"none": None, "list": [True, False, None, "x"], "empty": {}},
}
"""Values only pydantic's serializer may write (Python's json writes floats otherwise)."""
USAGE = {"steps": 2, "llm_calls": 2, "prompt_tokens": 10, "completion_tokens": 5}
USAGE |= {"total_tokens": 15}


def event(seq: int, type_: str, step: int = 1, **data: Any) -> Event:
    return Event(RUN, seq, type_, 1_700_000_000.123, step, data)  # type: ignore[arg-type]


def a_run(mapper: FrameMapper, ended: Event) -> list[tuple[int, list[Wire]]]:
    """Every kind of frame a run's events make, ending with `ended`."""
    action = {"call_id": "c1", "tool": "calculator"}
    finish = {"call_id": "f", "tool": "task_finished"}
    child = {"call_id": "c2", "agent": "researcher", "child_run_id": "run_child"}
    events = [
        event(1, EventType.RUN_QUEUED, 0, task=TRICKY, model="m", tools=["calculator"]),
        event(2, EventType.RUN_STARTED, 0),
        event(3, EventType.STEP_STARTED, max_steps=5),
        event(4, EventType.TOKEN, delta=TRICKY),
        event(5, EventType.TOKEN, delta=""),
        event(6, EventType.LLM_CALL, model="gpt-x", prompt_tokens=3, cost_usd=1e-07),
        event(7, EventType.THOUGHT, text=TRICKY),
        event(8, EventType.ACTION, **action, arguments={"expression": TRICKY, "n": 0.1}),
        event(9, EventType.OBSERVATION, **action, content=TRICKY, is_error=False),
        event(10, EventType.STEP_STARTED, step=2, max_steps=5),
        event(11, EventType.THOUGHT, step=2, text="plain"),
        event(12, EventType.ACTION, step=2, **action, arguments='{"raw": "text"}'),
        event(13, EventType.OBSERVATION, step=2, **action, content="", is_error=True),
        event(14, EventType.INTERVENTION, step=2, kind="stop_prompt", message=TRICKY),
        event(15, EventType.LLM_RETRY, step=2, attempt=1, error="503", delay_s=0.5),
        event(16, EventType.USER_MESSAGE, step=2, content=TRICKY, delivered=True),
        event(17, "agent.started", step=2, **child),
        event(18, "agent.started", step=2, agent="b", child_run_id="run_b"),
        event(19, "agent.finished", step=2, **child, status="completed", reason="finished"),
        event(20, "agent.finished", step=2, **child, status="failed", reason="error"),
        event(21, "agent.finished", step=2, **child, status="cancelled", reason=None),
        event(22, EventType.APPROVAL_REQUESTED, step=2, **action, arguments=NUMBERS),
        event(23, EventType.APPROVAL_DECIDED, step=2, call_id="c1", approved=True, message=None),
        event(24, EventType.ACTION, step=2, **finish, arguments={"answer": TRICKY}),
        event(25, EventType.OBSERVATION, step=2, **finish, content="rejected"),
        event(26, EventType.TOKEN, step=2, delta="open"),
        ended,
    ]
    return [(0, mapper.started())] + [(e.seq, mapper.map(e)) for e in events]


def waiting(mapper: FrameMapper) -> list[Wire]:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    record = RunRecord.model_validate(
        {
            "id": RUN,
            "status": RunStatus.REQUIRES_ACTION,
            "request": {"task": "t", "client_tools": [{"name": "pick", "description": "d"}]},
            "model": "scripted",
            "settings": {},
            "approval": ApprovalState(
                pending=[
                    PendingApproval(call_id=c, tool=t, arguments=NUMBERS, requested_at=now)
                    for c, t in (("c1", "send_mail"), ("c2", "pick"))
                ],
                waiting_since=now,
            ),
        }
    )
    mapper.map(event(1, EventType.STEP_STARTED, max_steps=3))
    mapper.map(event(2, EventType.TOKEN, delta="half"))
    return mapper.interrupted(record)


def endings() -> list[Event]:
    output = {"text": TRICKY, **NUMBERS}
    completed = {"answer": TRICKY, "output": output, "reason": "finished", "degraded": False}
    no_answer = {"answer": None, "reason": "max_steps", "degraded": True}
    return [
        event(30, EventType.RUN_COMPLETED, step=2, result=completed, usage=USAGE),
        event(30, EventType.RUN_INCOMPLETE, step=2, result=no_answer, usage=USAGE),
        event(30, EventType.RUN_CANCELLED, step=2, usage={}),
        event(30, EventType.RUN_FAILED, step=2, error={"type": "llm_status", "message": TRICKY}),
        event(30, EventType.RUN_FAILED, step=2, error={}, usage={"prompt_tokens": None}),
    ]


def every_frame() -> list[tuple[int, Wire]]:
    made: list[tuple[int, Wire]] = []
    for ended in endings():
        mapper = FrameMapper(thread_id=TRICKY, run_id="client-run", finishline_run_id=RUN)
        made += [(seq, e) for seq, events in a_run(mapper, ended) for e in events]
    mapper = FrameMapper(thread_id="t", run_id="r", finishline_run_id=RUN)
    made += [(2, e) for e in waiting(mapper)]
    unnamed = FrameMapper(thread_id="t", run_id="r", finishline_run_id=RUN)  # no model named
    made += [(5, e) for e in unnamed.map(event(5, EventType.RUN_COMPLETED, usage=USAGE))]
    return made


FRAMES = every_frame()


def test_every_event_type_the_mapping_makes_is_covered() -> None:
    kinds = {e["type"] for _, e in FRAMES}
    unused = {"TEXT_MESSAGE_CHUNK", "TOOL_CALL_CHUNK", "REASONING_MESSAGE_CHUNK"}  # DESIGN §16
    unused |= {"STATE_SNAPSHOT", "STATE_DELTA", "MESSAGES_SNAPSHOT", "ACTIVITY_SNAPSHOT"}
    unused |= {"ACTIVITY_DELTA", "RAW", "REASONING_ENCRYPTED_VALUE"}
    assert kinds == {t.value for t in AguiType} - unused
    outcomes = {e["outcome"]["type"] for _, e in FRAMES if e["type"] == "RUN_FINISHED"}
    assert outcomes == {"success", "cancelled", "interrupt"}


@pytest.mark.parametrize(
    ("seq", "made"),
    [pytest.param(seq, e, id=f"{i}-{e['type']}") for i, (seq, e) in enumerate(FRAMES)],
)
def test_each_frame_is_the_packages_encoder_output_byte_for_byte(seq: int, made: Wire) -> None:
    """The package's model of the same values (not of our JSON: NaN, infinities and floats
    reach its serializer as they reached ours), written by its encoder."""
    model = protocol_event(made)
    assert frame(seq, [made]) == f"id: {seq}\n{EventEncoder().encode(model)}".encode()
    assert json.loads(frame(seq, [made]).split(b"data: ", 1)[1]) is not None


def test_a_batch_is_its_events_frames_in_order() -> None:
    mapper = FrameMapper(thread_id="t", run_id="r", finishline_run_id=RUN)
    events = [event(1, EventType.STEP_STARTED), event(2, EventType.THOUGHT, text="hm")]
    again = FrameMapper(thread_id="t", run_id="r", finishline_run_id=RUN)
    assert mapper.frames(events) == b"".join(frame(e.seq, again.map(e)) for e in events)
