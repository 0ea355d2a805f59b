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
    script = [says(None, *calls), finish("after the redo")]
    first = await collect(
        run_react(task="t", model=ScriptedModel(script), tools=[read, send, noted])
    )
    state = RunState.from_checkpoint(in_flight_checkpoint(first))
    assert state.acting
    assert state.step == 1
    for tool in (read, send, noted):
        tool.calls.clear()

    resumed_model = ScriptedModel(script)  # made anew: it goes on from the saved reply
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


async def test_a_scripted_model_made_anew_goes_on_from_the_reply_its_checkpoint_saved() -> None:
    """A replica taking a run over makes the run's scripted model anew from its script: the
    checkpoint carries the model's place, so a step redone gets the reply it got before, and
    the non-idempotent call in flight then is not run again (nor is an earlier one)."""
    send = echo_tool("send", idempotent=False)
    script = [
        says(None, call("send", {"text": "first"}, "c_first")),
        says(None, call("send", {"text": "second"}, "c_second")),
        finish("sent twice, maybe"),
    ]
    first = await collect(run_react(task="t", model=ScriptedModel(script), tools=[send]))
    acting = [c.state for c in of_type(first, Checkpoint) if c.state["acting"]]
    after_step_1 = next(c.state for c in of_type(first, Checkpoint) if not c.state["acting"])

    # between steps: the next call gets the second reply, not the first again
    send.calls.clear()
    model = ScriptedModel(script)
    resumed = await collect(
        run_react(task="t", model=model, tools=[send], state=RunState.from_checkpoint(after_step_1))
    )
    assert send.calls == [{"text": "second"}]
    assert ending(resumed).answer == "sent twice, maybe"
    assert len(model.calls) == 2

    # in step 2's calls: the step is redone from its reply, its call reported unknown
    send.calls.clear()
    model = ScriptedModel(script)
    state = RunState.from_checkpoint(acting[1])
    resumed = await collect(run_react(task="t", model=model, tools=[send], state=state))
    assert send.calls == []
    (unknown,) = of_type(resumed, Observation)
    assert (unknown.call_id, unknown.is_error) == ("c_second", True)
    assert unknown.content == EN.outcome_unknown.format(tool="send")
    end = ending(resumed)
    assert (end.reason, end.answer, end.usage.llm_calls) == (
        StopReason.FINISHED,
        "sent twice, maybe",
        3,
    )
    assert len(model.calls) == 1  # the finish: the reply after the one redone


async def test_a_run_resumed_from_its_final_checkpoint_ends_with_its_answer_again() -> None:
    """Its process stored the final conversation (a lone task_finished call) and stopped
    before the run's end was stored: resumed, the run ends as it did, the model not asked."""
    send = echo_tool("send", idempotent=False)
    script = [says(None, call("send", {"text": "x"})), finish("sent")]
    first = await collect(run_react(task="t", model=ScriptedModel(script), tools=[send]))
    final = of_type(first, Checkpoint)[-1]
    assert final.state["messages"][-1]["tool_calls"][0]["function"]["name"] == "task_finished"
    send.calls.clear()

    model = ScriptedModel(script)
    state = RunState.from_checkpoint(final.state)
    resumed = await collect(run_react(task="t", model=model, tools=[send], state=state))

    end = ending(resumed)
    assert (end.reason, end.answer, end.usage.steps, end.usage.llm_calls) == (
        StopReason.FINISHED,
        "sent",
        2,
        2,
    )
    assert (model.calls, send.calls) == ([], [])
    assert [s.step for s in of_type(resumed, StepStarted)] == [2]  # redone, its own number
