"""Plan-then-execute (`planning_interval`): which calls plan, what they are sent, the nudge
once then the skip, and how planning calls are counted."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

from app.engine.loop import run_react
from app.engine.policies import InterventionKind, Limits, StopReason
from app.engine.ports import Message, Reply, ToolSpec
from app.engine.prompts import EN, ZH
from app.engine.steps import Intervention, Observation, StepStarted
from app.llm.scripted import FunctionModel, ScriptedModel
from app.tools.plan import UpdatePlanTool
from tests.engine.kit import call, collect, echo_tool, ending, finish, of_type, says

TWO_STEPS = [
    {"step": "look it up", "status": "in_progress"},
    {"step": "answer", "status": "pending"},
]


def plans(items: list[dict[str, Any]] = TWO_STEPS, content: str | None = None) -> Any:
    return says(content, call("update_plan", {"plan": items}))


def tools() -> list[Any]:
    return [UpdatePlanTool(), echo_tool()]


def planning(steps: list[Any]) -> list[Intervention]:
    return [s for s in of_type(steps, Intervention) if s.kind == InterventionKind.PLANNING]


async def test_the_first_call_and_every_nth_step_after_it_plan_forced_to_call_update_plan() -> None:
    done = [{**item, "status": "completed"} for item in TWO_STEPS]
    script = [
        plans(),  # before step 1
        says(None, call("echo", {"text": "1"})),  # step 1
        says(None, call("echo", {"text": "2"})),  # step 2
        plans(done),  # before step 3
        finish("42"),  # step 3
    ]
    model = ScriptedModel(script)
    limits = Limits(planning_interval=2, max_steps=5)
    steps = await collect(run_react(task="t", model=model, tools=tools(), limits=limits))

    assert [c.force_tool for c in model.calls] == ["update_plan", None, None, "update_plan", None]
    assert all(c.tools == ["update_plan", "echo", "task_finished"] for c in model.calls)
    first, second = planning(steps)
    assert (first.step, first.message) == (1, EN.planning_prompt)
    assert model.calls[0].messages[-1] == {"role": "user", "content": EN.planning_prompt}
    # a planning call after the first shows the plan as it stands
    assert second.step == 3
    assert "completed 0/2" in second.message
    assert "1. [in_progress] look it up\n2. [pending] answer" in second.message
    assert model.calls[3].messages[-1] == {"role": "user", "content": second.message}
    # the planning call's plan is recorded, then the step's own call follows in the same step
    recorded = [o for o in of_type(steps, Observation) if o.tool == "update_plan"]
    assert [o.step for o in recorded] == [1, 3]
    assert [s.step for s in of_type(steps, StepStarted)] == [1, 2, 3]
    end = ending(steps)
    assert (end.reason, end.answer) == (StopReason.FINISHED, "42")
    assert (end.usage.steps, end.usage.llm_calls) == (3, 5)


async def test_planning_calls_are_not_steps_so_max_steps_counts_only_the_steps_own() -> None:
    script = [plans(), says(None, call("echo")), plans(), says(None, call("echo", {"n": "2"}))]
    model = ScriptedModel([*script, says("best answer")])
    limits = Limits(planning_interval=1, max_steps=2)
    steps = await collect(run_react(task="t", model=model, tools=tools(), limits=limits))
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.MAX_STEPS, "best answer", True)
    # two steps, each with its planning call, then the final answer: five calls
    assert (end.usage.steps, end.usage.llm_calls) == (2, 5)
    assert [c.force_tool for c in model.calls] == ["update_plan", None, "update_plan", None, None]


async def test_planning_calls_count_their_tokens_and_tool_calls_in_usage() -> None:
    planned = says(None, call("update_plan", {"plan": TWO_STEPS}), tokens=(100, 20))
    model = ScriptedModel([planned, says(None, *finish().tool_calls, tokens=(5, 1))])
    limits = Limits(planning_interval=3)
    end = ending(await collect(run_react(task="t", model=model, tools=tools(), limits=limits)))
    assert (end.usage.prompt_tokens, end.usage.completion_tokens) == (105, 21)
    assert (end.usage.llm_calls, end.usage.tool_calls, end.usage.steps) == (2, 1, 1)


async def test_a_planning_call_counts_in_the_runs_time_so_the_deadline_cuts_it() -> None:
    async def planning_hangs(messages: list[Message], tools: list[ToolSpec]) -> Reply:
        if messages[-1] == {"role": "user", "content": EN.planning_prompt}:
            await asyncio.Event().wait()  # the planning call never answers
        return says("best so far")

    model = FunctionModel(planning_hangs)
    limits = Limits(planning_interval=1, max_time_s=0.2, final_answer_timeout_s=5)
    steps = await collect(run_react(task="t", model=model, tools=tools(), limits=limits))
    end = ending(steps)
    # cut by the run's own deadline (llm_timeout_s is 60 s): then the degraded final answer
    assert (end.reason, end.answer, end.degraded) == (StopReason.TIMEOUT, "best so far", True)
    assert [c.force_tool for c in model.calls] == ["update_plan", None]
    assert len(planning(steps)) == 1


async def test_a_reply_without_a_plan_is_nudged_once_then_planning_is_skipped() -> None:
    model = ScriptedModel([says("no plan from me"), says("still none"), finish("done")])
    limits = Limits(planning_interval=1)
    with capture_logs() as logs:
        steps = await collect(run_react(task="t", model=model, tools=tools(), limits=limits))
    assert [p.message for p in planning(steps)] == [EN.planning_prompt, EN.planning_nudge]
    assert [c.force_tool for c in model.calls] == ["update_plan", "update_plan", None]
    # each reply without a plan stays in the conversation, the nudge after it
    assert model.calls[1].messages[-2:] == [
        {"role": "assistant", "content": "no plan from me"},
        {"role": "user", "content": EN.planning_nudge},
    ]
    end = ending(steps)
    assert (end.reason, end.usage.steps, end.usage.llm_calls) == (StopReason.FINISHED, 1, 3)
    assert [e for e in logs if e["event"] == "planning_skipped"]


async def test_a_model_that_never_plans_gets_two_planning_calls_a_planning_step_and_no_more() -> (
    None
):
    # every planning step: the planning call, the nudged one, then the step's own call
    script = [
        says("no"),
        says("no"),
        says(None, call("echo", {"n": "1"})),
        says("no"),
        says("no"),
        finish(),
    ]
    model = ScriptedModel(script)
    limits = Limits(planning_interval=1, max_steps=2)
    steps = await collect(run_react(task="t", model=model, tools=tools(), limits=limits))
    assert ending(steps).reason == StopReason.FINISHED
    assert [p.step for p in planning(steps)] == [1, 1, 2, 2]
    assert len(model.calls) == 6


async def test_a_nudged_reply_that_plans_ends_the_planning_of_that_step() -> None:
    model = ScriptedModel([says("let me think"), plans(), finish()])
    limits = Limits(planning_interval=4)
    with capture_logs() as logs:
        steps = await collect(run_react(task="t", model=model, tools=tools(), limits=limits))
    assert [p.message for p in planning(steps)] == [EN.planning_prompt, EN.planning_nudge]
    assert [c.force_tool for c in model.calls] == ["update_plan", "update_plan", None]
    assert not [e for e in logs if e["event"] == "planning_skipped"]


async def test_an_update_plan_call_that_fails_records_no_plan_so_it_is_nudged() -> None:
    bad = [{"step": "a", "status": "in_progress"}, {"step": "b", "status": "in_progress"}]
    model = ScriptedModel([plans(bad), plans(), finish()])
    limits = Limits(planning_interval=1)
    steps = await collect(run_react(task="t", model=model, tools=tools(), limits=limits))
    results = [o for o in of_type(steps, Observation) if o.tool == "update_plan"]
    assert [o.is_error for o in results] == [True, False]
    assert [p.message for p in planning(steps)] == [EN.planning_prompt, EN.planning_nudge]


async def test_other_calls_of_a_planning_reply_run_like_any_others() -> None:
    reply = says(None, call("update_plan", {"plan": TWO_STEPS}), call("echo", {"text": "hi"}))
    model = ScriptedModel([reply, finish()])
    limits = Limits(planning_interval=1)
    steps = await collect(run_react(task="t", model=model, tools=tools(), limits=limits))
    assert [o.content for o in of_type(steps, Observation) if o.tool == "echo"] == ["echo: hi"]
    assert len(planning(steps)) == 1


async def test_a_planning_reply_that_finishes_ends_the_run_there() -> None:
    # a model that cannot be forced may finish at once: that ends the run like any reply
    model = ScriptedModel([finish("already known")])
    limits = Limits(planning_interval=1)
    steps = await collect(run_react(task="t", model=model, tools=tools(), limits=limits))
    end = ending(steps)
    assert (end.reason, end.answer, end.usage.llm_calls) == (
        StopReason.FINISHED,
        "already known",
        1,
    )
    assert len(planning(steps)) == 1


async def test_with_stop_tool_off_a_plain_planning_reply_answers_the_task() -> None:
    model = ScriptedModel([says("the answer is 4")])
    limits = Limits(planning_interval=1, stop_tool=False)
    end = ending(await collect(run_react(task="t", model=model, tools=tools(), limits=limits)))
    assert (end.reason, end.answer) == (StopReason.ANSWERED, "the answer is 4")


async def test_progress_reports_the_plan_the_planning_call_made() -> None:
    model = ScriptedModel([plans(), says(None, call("echo")), finish()])
    limits = Limits(planning_interval=5, progress=True)
    steps = await collect(run_react(task="t", model=model, tools=tools(), limits=limits))
    (progress,) = [s for s in of_type(steps, Intervention) if s.kind == InterventionKind.PROGRESS]
    assert progress.step == 2
    assert progress.message.endswith(" Plan: completed 0/2. Next: look it up.")


async def test_planning_is_off_by_default() -> None:
    model = ScriptedModel([says(None, call("echo")), finish()])
    steps = await collect(run_react(task="t", model=model, tools=tools()))
    assert planning(steps) == []
    assert [c.force_tool for c in model.calls] == [None, None]


async def test_the_planning_texts_follow_the_prompt_language() -> None:
    model = ScriptedModel([says("不"), says("不"), finish()])
    limits = Limits(planning_interval=1, prompt_language="zh")
    steps = await collect(run_react(task="t", model=model, tools=tools(), limits=limits))
    assert [p.message for p in planning(steps)] == [ZH.planning_prompt, ZH.planning_nudge]


def test_planning_needs_the_update_plan_tool() -> None:
    with pytest.raises(ValueError, match="update_plan"):
        run_react(
            task="t",
            model=ScriptedModel([]),
            tools=[echo_tool()],
            limits=Limits(planning_interval=1),
        )


async def test_restating_an_unchanged_plan_at_each_planning_step_is_a_plan_not_a_loop() -> None:
    """The third identical `update_plan` would be a repetition: at a planning step, where the
    call is forced, the same plan again is the model's review of it, recorded as a plan (no
    repetition hint, no planning nudge, no second planning call)."""
    script: list[Any] = []
    for n in range(4):
        script += [plans(), says(None, call("echo", {"text": str(n)}))]
    model = ScriptedModel([*script, plans(), finish("done")])
    limits = Limits(planning_interval=1, max_steps=5)
    steps = await collect(run_react(task="t", model=model, tools=tools(), limits=limits))

    restated = [o for o in of_type(steps, Observation) if o.tool == "update_plan"]
    assert len(restated) == 5
    assert not any(o.repeated or o.is_error for o in restated)
    assert [p.message for p in planning(steps)][1:] == [planning(steps)[1].message] * 4
    assert EN.planning_nudge not in [p.message for p in planning(steps)]
    assert [c.force_tool for c in model.calls] == ["update_plan", None] * 5
    assert ending(steps).reason == StopReason.FINISHED


async def test_the_same_plan_sent_again_and_again_outside_planning_is_still_a_repetition() -> None:
    again = [says(None, call("update_plan", {"plan": TWO_STEPS})) for _ in range(3)]
    model = ScriptedModel([*again, finish("done")])
    steps = await collect(run_react(task="t", model=model, tools=tools()))

    restated = [o for o in of_type(steps, Observation) if o.tool == "update_plan"]
    assert [o.repeated for o in restated] == [False, False, True]
