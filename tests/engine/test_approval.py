"""Human approval in the engine (DESIGN §9): a call of a tool that needs approval is not
executed; the step's other calls run; the run checkpoints and suspends; resuming from that
checkpoint with the person's decisions settles the calls, then the loop goes on."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest

from app.engine.loop import run_react
from app.engine.pending import Decision, PendingCall
from app.engine.policies import Limits, StopReason
from app.engine.state import RunState
from app.engine.steps import (
    Action,
    ApprovalRequested,
    Checkpoint,
    Finished,
    Observation,
    Step,
    Suspended,
    UserMessage,
)
from app.llm.scripted import ScriptedModel
from tests.engine.kit import FnTool, call, collect, ending, finish, of_type, says


async def until_suspended(steps: Any) -> list[Step]:
    out: list[Step] = []
    with anyio.fail_after(10):
        async for step in steps:
            out.append(step)
    assert isinstance(out[-1], Suspended), out[-1]
    assert not of_type(out, Finished)
    return out


def tools() -> tuple[FnTool, FnTool]:
    deploy = FnTool("deploy", lambda args, ctx: f"deployed {args['env']}", required=("env",))
    look = FnTool("look", lambda args, ctx: "looked")
    return deploy, look


def last_checkpoint(steps: list[Step]) -> RunState:
    (*_, checkpoint) = of_type(steps, Checkpoint)
    return RunState.from_checkpoint(checkpoint.state)


async def suspend_on_deploy(model: ScriptedModel) -> tuple[list[Step], FnTool, FnTool]:
    deploy, look = tools()
    steps = await until_suspended(
        run_react(task="ship it", model=model, tools=[deploy, look], approval={"deploy"})
    )
    return steps, deploy, look


async def test_a_call_needing_approval_is_not_run_the_others_are_and_the_run_suspends() -> None:
    model = ScriptedModel(
        [says("shipping", call("deploy", {"env": "prod"}, "c1"), call("look", {}, "c2"))]
    )
    steps, deploy, look = await suspend_on_deploy(model)

    assert deploy.calls == []
    assert look.calls == [{}]
    (asked,) = of_type(steps, ApprovalRequested)
    assert (asked.step, asked.call_id, asked.tool, asked.arguments) == (
        1,
        "c1",
        "deploy",
        {"env": "prod"},
    )
    assert asked.payload() == {"call_id": "c1", "tool": "deploy", "arguments": {"env": "prod"}}
    assert [o.call_id for o in of_type(steps, Observation)] == ["c2"]
    assert steps.index(asked) == steps.index(of_type(steps, Action)[0]) + 1
    suspended = steps[-1]
    assert isinstance(suspended, Suspended)
    assert suspended.pending == (PendingCall("c1", "deploy", {"env": "prod"}),)
    assert isinstance(steps[-2], Checkpoint)  # the state it resumes from is stored first
    state = last_checkpoint(steps)
    assert state.pending == [PendingCall("c1", "deploy", {"env": "prod"})]
    # the waiting call has no tool message yet: it comes when the person decides
    assert [m.get("tool_call_id") for m in state.messages if m["role"] == "tool"] == ["c2"]


async def test_an_approved_call_runs_on_resume_and_the_loop_goes_on() -> None:
    script = [says(None, call("deploy", {"env": "prod"}, "c1")), finish("shipped")]
    steps, _, _ = await suspend_on_deploy(ScriptedModel(script))
    deploy, look = tools()
    model = ScriptedModel(script, start=1)

    resumed = await collect(
        run_react(
            task="ship it",
            model=model,
            tools=[deploy, look],
            approval={"deploy"},
            state=last_checkpoint(steps),
            decisions=[Decision("c1", approved=True)],
        )
    )

    assert deploy.calls == [{"env": "prod"}]
    (seen,) = of_type(resumed, Observation)
    assert (seen.call_id, seen.content, seen.is_error, seen.step) == (
        "c1",
        "deployed prod",
        False,
        1,
    )
    assert ending(resumed).reason == StopReason.FINISHED
    assert ending(resumed).answer == "shipped"
    sent = model.calls[0].messages
    assert sent[-2]["tool_calls"][0]["id"] == "c1"
    assert sent[-1] == {"role": "tool", "tool_call_id": "c1", "content": "deployed prod"}
    assert ending(resumed).usage.llm_calls == 2
    assert ending(resumed).usage.tool_calls == 1


async def test_an_approved_call_runs_with_the_persons_edited_arguments() -> None:
    script = [says(None, call("deploy", {"env": "prod"}, "c1")), finish()]
    steps, _, _ = await suspend_on_deploy(ScriptedModel(script))
    deploy, look = tools()

    await collect(
        run_react(
            task="t",
            model=ScriptedModel(script, start=1),
            tools=[deploy, look],
            state=last_checkpoint(steps),
            decisions=[Decision("c1", approved=True, arguments={"env": "staging"})],
        )
    )

    assert deploy.calls == [{"env": "staging"}]


async def test_a_call_answered_with_a_result_is_not_run_its_result_is_the_observation() -> None:
    """A client tool's call (DESIGN §16): the client ran it; its result is what the model sees."""
    script = [says(None, call("deploy", {"env": "prod"}, "c1")), finish()]
    steps, _, _ = await suspend_on_deploy(ScriptedModel(script))
    deploy, look = tools()

    resumed = await collect(
        run_react(
            task="t",
            model=ScriptedModel(script, start=1),
            tools=[deploy, look],
            state=last_checkpoint(steps),
            decisions=[Decision("c1", approved=True, result="deployed by the client")],
        )
    )

    assert deploy.calls == []
    (observation,) = of_type(resumed, Observation)
    assert (observation.content, observation.is_error) == ("deployed by the client", False)
    assert resumed[-1].reason == StopReason.FINISHED


async def test_a_rejected_call_is_an_error_observation_carrying_the_message() -> None:
    script = [says(None, call("deploy", {"env": "prod"}, "c1")), finish()]
    steps, _, _ = await suspend_on_deploy(ScriptedModel(script))
    deploy, look = tools()
    model = ScriptedModel(script, start=1)

    resumed = await collect(
        run_react(
            task="t",
            model=model,
            tools=[deploy, look],
            state=last_checkpoint(steps),
            decisions=[Decision("c1", approved=False, message="not on a Friday")],
        )
    )

    assert deploy.calls == []
    (seen,) = of_type(resumed, Observation)
    assert seen.is_error
    assert "not on a Friday" in seen.content
    assert "deploy" in seen.content
    assert model.calls[0].messages[-1]["content"] == seen.content


async def test_an_undecided_call_is_rejected_with_a_default_message() -> None:
    script = [says(None, call("deploy", {"env": "prod"}, "c1")), finish()]
    steps, _, _ = await suspend_on_deploy(ScriptedModel(script))
    deploy, look = tools()

    resumed = await collect(
        run_react(
            task="t",
            model=ScriptedModel(script, start=1),
            tools=[deploy, look],
            state=last_checkpoint(steps),
        )
    )

    (seen,) = of_type(resumed, Observation)
    assert seen.is_error
    assert "no decision" in seen.content
    assert deploy.calls == []


async def test_several_waiting_calls_are_settled_in_call_order() -> None:
    script = [
        says(None, call("deploy", {"env": "a"}, "c1"), call("deploy", {"env": "b"}, "c2")),
        finish(),
    ]
    steps, _, _ = await suspend_on_deploy(ScriptedModel(script))
    assert [a.call_id for a in of_type(steps, ApprovalRequested)] == ["c1", "c2"]
    deploy, look = tools()
    model = ScriptedModel(script, start=1)

    resumed = await collect(
        run_react(
            task="t",
            model=model,
            tools=[deploy, look],
            state=last_checkpoint(steps),
            decisions=[Decision("c2", approved=True), Decision("c1", approved=False)],
        )
    )

    assert [o.call_id for o in of_type(resumed, Observation)] == ["c1", "c2"]
    assert deploy.calls == [{"env": "b"}]
    assert [m["tool_call_id"] for m in model.calls[0].messages if m["role"] == "tool"] == [
        "c1",
        "c2",
    ]


async def test_a_call_that_fails_its_schema_asks_no_approval() -> None:
    deploy, look = tools()
    model = ScriptedModel([says(None, call("deploy", {}, "c1")), finish()])

    steps = await collect(
        run_react(task="t", model=model, tools=[deploy, look], approval={"deploy"})
    )

    assert of_type(steps, ApprovalRequested) == []
    assert of_type(steps, Observation)[0].is_error


async def test_edited_arguments_failing_the_schema_reach_the_model_as_an_error() -> None:
    script = [says(None, call("deploy", {"env": "prod"}, "c1")), finish()]
    steps, _, _ = await suspend_on_deploy(ScriptedModel(script))
    deploy, look = tools()

    resumed = await collect(
        run_react(
            task="t",
            model=ScriptedModel(script, start=1),
            tools=[deploy, look],
            state=last_checkpoint(steps),
            decisions=[Decision("c1", approved=True, arguments={"env": 3})],
        )
    )

    (seen,) = of_type(resumed, Observation)
    assert seen.is_error
    assert deploy.calls == []


async def test_time_spent_waiting_does_not_count_against_max_time() -> None:
    now = [100.0]
    script = [says(None, call("deploy", {"env": "prod"}, "c1")), finish()]
    deploy, look = tools()

    def clock() -> float:
        return now[0]

    steps = await until_suspended(
        run_react(
            task="t",
            model=ScriptedModel(script),
            tools=[deploy, look],
            approval={"deploy"},
            limits=Limits(max_time_s=30),
            clock=clock,
        )
    )
    state = last_checkpoint(steps)
    assert state.elapsed_s == pytest.approx(0.0)
    now[0] += 10_000.0  # a person took their time; a fresh engine resumes later

    resumed = await collect(
        run_react(
            task="t",
            model=ScriptedModel(script, start=1),
            tools=[deploy, look],
            limits=Limits(max_time_s=30),
            clock=clock,
            state=state,
            decisions=[Decision("c1", approved=True)],
        )
    )

    assert ending(resumed).reason == StopReason.FINISHED


async def test_a_cancel_while_settling_still_gives_every_waiting_call_its_tool_message() -> None:
    script = [says(None, call("deploy", {"env": "prod"}, "c1")), finish()]
    steps, _, _ = await suspend_on_deploy(ScriptedModel(script))
    cancelled = asyncio.Event()

    async def hang(args: dict[str, Any], ctx: Any) -> str:
        cancelled.set()  # somebody cancels the run while the approved call runs
        await asyncio.Event().wait()
        return "never"

    deploy = FnTool("deploy", hang, required=("env",))
    runner = run_react(
        task="t",
        model=ScriptedModel(script, start=1),
        tools=[deploy],
        state=(state := last_checkpoint(steps)),
        decisions=[Decision("c1", approved=True)],
        cancel=cancelled,
    )
    resumed = await collect(runner)

    assert ending(resumed).reason == StopReason.CANCELLED
    (seen,) = of_type(resumed, Observation)
    assert seen.is_error
    assert seen.call_id == "c1"
    assert state.messages[-1]["tool_call_id"] == "c1"
    assert state.pending == []


async def test_a_steering_message_waits_for_the_resume_and_decides_nothing() -> None:
    script = [says(None, call("deploy", {"env": "prod"}, "c1")), finish()]
    steps, _, _ = await suspend_on_deploy(ScriptedModel(script))
    deploy, look = tools()
    model = ScriptedModel(script, start=1)
    inbox = ["go ahead"]

    def take() -> list[str]:
        taken = list(inbox)
        inbox.clear()
        return taken

    resumed = await collect(
        run_react(
            task="t",
            model=model,
            tools=[deploy, look],
            state=last_checkpoint(steps),
            inbox=take,
        )
    )

    assert deploy.calls == []  # a message is not an approval
    (said,) = of_type(resumed, UserMessage)
    assert said.content == "go ahead"
    roles = [m["role"] for m in model.calls[0].messages[-2:]]
    assert roles == ["tool", "user"]
