"""Resuming a run whose process stopped while its step's tool calls were in flight (DESIGN §8):
the step is redone from its calls, under its own number; a call whose result was recorded is
not run again, an idempotent tool runs again, and any other call gets an `is_error`
observation saying its outcome is unknown."""

from __future__ import annotations

from typing import Any

from app.engine.loop import run_react
from app.engine.policies import StopReason
from app.engine.prompts import EN
from app.engine.state import RunState
from app.engine.steps import Action, Checkpoint, Observation, Step, StepStarted
from app.engine.toolcalls import CallResult
from app.llm.scripted import ScriptedModel
from tests.engine.kit import (
    call,
    collect,
    echo_tool,
    ending,
    finish,
    of_type,
    says,
)


def in_flight_checkpoint(steps: list[Step]) -> dict[str, Any]:
    """The checkpoint taken as the first step's calls began."""
    acting = [c for c in of_type(steps, Checkpoint) if c.state["acting"]]
    assert acting, "no checkpoint was taken while calls were in flight"
    return acting[0].state


async def test_a_step_resumed_mid_calls_reruns_idempotent_calls_and_reports_the_rest_unknown() -> (
    None
):
    read = echo_tool("read")  # idempotent
    send = echo_tool("send", idempotent=False)
    noted = echo_tool("note", idempotent=False)
    calls = (
        call("read", {"text": "a"}, "c_read"),
        call("send", {"text": "b"}, "c_send"),
        call("note", {"text": "c"}, "c_note"),
    )
    first = await collect(
        run_react(
            task="t",
            model=ScriptedModel([says(None, *calls), finish()]),
            tools=[read, send, noted],
        )
    )
    state = RunState.from_checkpoint(in_flight_checkpoint(first))
    assert state.acting
    assert state.step == 1
    for tool in (read, send, noted):
        tool.calls.clear()

    resumed_model = ScriptedModel([finish("after the redo")])
    recorded = {"c_note": CallResult("echo: c (recorded)", False, 3)}
    steps = await collect(
        run_react(
            task="t",
            model=resumed_model,
            tools=[read, send, noted],
            state=state,
            recorded=recorded,
        )
    )

    assert (read.calls, send.calls, noted.calls) == ([{"text": "a"}], [], [])
    assert of_type(steps, StepStarted)[0].step == 1  # redone under its own number
    assert [a.call_id for a in of_type(steps, Action) if a.step == 1] == [
        "c_read",
        "c_send",
        "c_note",
    ]
    observed = {o.call_id: o for o in of_type(steps, Observation)}
    assert set(observed) == {"c_read", "c_send"}  # the recorded one is in the log already
    assert (observed["c_read"].content, observed["c_read"].is_error) == ("echo: a", False)
    assert observed["c_send"].is_error
    assert observed["c_send"].content == EN.outcome_unknown.format(tool="send")
    assert "unknown" in observed["c_send"].content

    sent = resumed_model.calls[0].messages
    tool_messages = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    assert tool_messages == {
        "c_read": "echo: a",
        "c_send": EN.outcome_unknown.format(tool="send"),
        "c_note": "echo: c (recorded)",
    }
    assert sum(1 for m in sent if m["role"] == "assistant") == 1  # the reply is not doubled
    end = ending(steps)
    assert (end.reason, end.answer, end.usage.steps, end.usage.llm_calls) == (
        StopReason.FINISHED,
        "after the redo",
        2,
        2,
    )


async def test_a_checkpoint_after_the_step_does_not_redo_its_calls() -> None:
    send = echo_tool("send", idempotent=False)
    first = await collect(
        run_react(
            task="t",
            model=ScriptedModel([says(None, call("send", {"text": "x"})), finish()]),
            tools=[send],
        )
    )
    after = next(c for c in of_type(first, Checkpoint) if not c.state["acting"])
    state = RunState.from_checkpoint(after.state)
    assert not state.acting
    send.calls.clear()
    steps = await collect(
        run_react(task="t", model=ScriptedModel([finish()]), tools=[send], state=state)
    )
    assert send.calls == []
    assert [s.step for s in of_type(steps, StepStarted)] == [2]


async def test_a_reply_that_only_finishes_takes_no_in_flight_checkpoint() -> None:
    steps = await collect(run_react(task="t", model=ScriptedModel([finish()])))
    assert not [c for c in of_type(steps, Checkpoint) if c.state["acting"]]
