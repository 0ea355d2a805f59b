"""The effect of each remaining setting, plus checkpoints, resume and logs."""

from __future__ import annotations

from structlog.contextvars import merge_contextvars
from structlog.testing import capture_logs

from app.engine.loop import run_react
from app.engine.policies import InterventionKind, Limits, StopReason
from app.engine.ports import Plan, PlanItem, ToolContext
from app.engine.prompts import EN, ZH
from app.engine.state import RunState
from app.engine.steps import Checkpoint, Intervention, LLMCalled, Observation, Thought, TokenDelta
from app.llm.scripted import ScriptedModel
from tests.engine.kit import FnTool, call, collect, echo_tool, ending, finish, of_type, says


def interventions(steps: list, kind: InterventionKind) -> list[Intervention]:
    return [s for s in of_type(steps, Intervention) if s.kind == kind]


async def test_stop_tool_prompt_is_added_to_the_system_prompt() -> None:
    model = ScriptedModel([finish()])
    await collect(run_react(task="the task", model=model, system_prompt="You are terse."))
    system, user = model.calls[0].messages
    assert system == {"role": "system", "content": "You are terse.\n\n" + EN.stop_tool_prompt}
    assert user == {"role": "user", "content": "the task"}
    assert model.calls[0].tools == ["task_finished"]


async def test_no_stop_prompt_and_no_finish_tool_when_stop_tool_is_off() -> None:
    model = ScriptedModel([says("x")])
    await collect(run_react(task="t", model=model, limits=Limits(stop_tool=False)))
    assert model.calls[0].messages == [{"role": "user", "content": "t"}]


async def test_nudge_is_a_user_message_after_a_reply_without_tool_calls() -> None:
    model = ScriptedModel([says("I think I am done"), finish("done")])
    steps = await collect(run_react(task="t", model=model))
    assert ending(steps).reason == StopReason.FINISHED
    assert model.calls[1].messages[-2:] == [
        {"role": "assistant", "content": "I think I am done"},
        {"role": "user", "content": EN.stop_tool_prompt},
    ]
    (nudge,) = interventions(steps, InterventionKind.STOP_PROMPT)
    assert nudge.step == 2


async def test_max_nudges_counts_only_nudges_in_a_row() -> None:
    replies = [
        says("a"),
        says(None, call("echo")),
        says("b"),
        says(None, call("echo", {"x": "1"})),
        says("c"),
        finish(),
    ]
    model = ScriptedModel(replies)
    steps = await collect(
        run_react(task="t", model=model, tools=[echo_tool()], limits=Limits(max_nudges=1))
    )
    assert ending(steps).reason == StopReason.FINISHED
    assert len(interventions(steps, InterventionKind.STOP_PROMPT)) == 3


async def test_max_nudges_zero_ends_at_the_first_reply_without_tool_calls() -> None:
    model = ScriptedModel([says("done?")])
    steps = await collect(run_react(task="t", model=model, limits=Limits(max_nudges=0)))
    end = ending(steps)
    assert (end.reason, end.answer) == (StopReason.NUDGE_LIMIT, "done?")


async def test_progress_is_injected_before_each_step_after_the_first() -> None:
    model = ScriptedModel([says(None, call("echo", {"n": str(i)})) for i in range(2)] + [finish()])
    limits = Limits(progress=True, max_steps=5)
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()], limits=limits))
    progress = interventions(steps, InterventionKind.PROGRESS)
    assert [p.step for p in progress] == [2, 3]
    assert progress[0].message.startswith("[progress] Step 2/5.")
    assert "Tool calls so far: 1." in progress[0].message
    assert model.calls[1].messages[-1]["content"] == progress[0].message


async def test_no_progress_when_it_is_off() -> None:
    model = ScriptedModel([says(None, call("echo")), finish()])
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()]))
    assert interventions(steps, InterventionKind.PROGRESS) == []


async def test_progress_reports_the_plan_kept_with_update_plan() -> None:
    def update_plan(args: dict, ctx: ToolContext) -> str:
        ctx.plan.items = [
            PlanItem("search", "completed"),
            PlanItem("read", "in_progress"),
            PlanItem("write"),
        ]
        return "plan updated"

    model = ScriptedModel([says(None, call("update_plan")), finish()])
    limits = Limits(progress=True)
    steps = await collect(
        run_react(task="t", model=model, tools=[FnTool("update_plan", update_plan)], limits=limits)
    )
    (progress,) = interventions(steps, InterventionKind.PROGRESS)
    assert "Plan: completed 1/3. Next: read." in progress.message


async def test_context_over_max_context_tokens_elides_the_oldest_tool_results() -> None:
    big = "data " * 400  # ~500 tokens each
    replies = [says(None, call("read", {"i": str(i)})) for i in range(3)] + [finish()]
    model = ScriptedModel(replies)
    limits = Limits(max_context_tokens=1400, max_tool_result_chars=0)
    steps = await collect(
        run_react(task="t", model=model, tools=[FnTool("read", lambda a, c: big)], limits=limits)
    )
    assert ending(steps).reason == StopReason.FINISHED
    trims = interventions(steps, InterventionKind.CONTEXT_TRIM)
    assert trims
    last_prompt = model.calls[-1].messages
    tool_contents = [m["content"] for m in last_prompt if m["role"] == "tool"]
    assert tool_contents[0].startswith("[Earlier result of read elided")
    assert tool_contents[-1] == big  # the newest result is kept
    assert all(o.content == big for o in of_type(steps, Observation))  # whole in the log


async def test_stream_tokens_yields_deltas_before_the_thought() -> None:
    model = ScriptedModel([finish("ok", content="Let me think about this carefully.")])
    steps = await collect(run_react(task="t", model=model, limits=Limits(stream_tokens=True)))
    deltas = of_type(steps, TokenDelta)
    assert len(deltas) > 1
    (thought,) = of_type(steps, Thought)
    assert "".join(d.delta for d in deltas) == thought.text
    assert steps.index(deltas[-1]) < steps.index(thought)


async def test_no_token_deltas_when_streaming_is_off() -> None:
    model = ScriptedModel([finish("ok", content="Some text")])
    steps = await collect(run_react(task="t", model=model))
    assert of_type(steps, TokenDelta) == []


async def test_prompt_language_zh_injects_the_chinese_texts() -> None:
    model = ScriptedModel([says("好了"), finish()])
    await collect(run_react(task="t", model=model, limits=Limits(prompt_language="zh")))
    assert model.calls[0].messages[0]["content"] == ZH.stop_tool_prompt
    assert model.calls[1].messages[-1]["content"] == ZH.stop_tool_prompt


async def test_tokens_are_estimated_when_the_provider_reports_none() -> None:
    model = ScriptedModel([says(None, call("echo")), finish()])
    steps = await collect(
        run_react(
            task="t" * 400, model=model, tools=[echo_tool()], limits=Limits(max_total_tokens=50)
        )
    )
    end = ending(steps)
    assert end.reason == StopReason.TOKEN_BUDGET
    assert of_type(steps, LLMCalled)[0].estimated is True
    assert end.usage.prompt_tokens >= 100


async def test_a_checkpoint_follows_every_step_and_a_run_resumes_from_it() -> None:
    model = ScriptedModel(
        [says(None, call("echo", {"text": "1"})), says(None, call("echo", {"text": "2"}))]
    )
    steps = await collect(
        run_react(
            task="t",
            model=model,
            tools=[echo_tool()],
            limits=Limits(max_steps=2, final_answer_on_limit=False),
        )
    )
    checkpoints = of_type(steps, Checkpoint)
    # one as each step's calls begin (`acting`), one after the step
    assert [(c.step, c.state["acting"]) for c in checkpoints] == [
        (1, True),
        (1, False),
        (2, True),
        (2, False),
    ]
    state = RunState.from_checkpoint(checkpoints[1].state)
    assert state.step == 1
    # a model made anew from the same script goes on from the reply the checkpoint saved
    resumed = ScriptedModel([says(None, call("echo", {"text": "1"})), finish("resumed")])
    more = await collect(run_react(task="t", model=resumed, tools=[echo_tool()], state=state))
    end = ending(more)
    assert (end.reason, end.answer, end.usage.steps, end.usage.llm_calls) == (
        StopReason.FINISHED,
        "resumed",
        2,
        2,
    )
    last = resumed.calls[0].messages[-1]
    assert (last["role"], last["content"]) == ("tool", "echo: 1")


async def test_checkpoint_round_trips_counters_and_plan() -> None:
    state = RunState(
        messages=[{"role": "user", "content": "t"}],
        step=3,
        nudges_in_row=1,
        plan=Plan([PlanItem("a", "completed")]),
    )
    state.call_counts["k"] = 2
    again = RunState.from_checkpoint(state.to_checkpoint(elapsed_s=4.5))
    assert again.step == 3
    assert again.nudges_in_row == 1
    assert again.elapsed_s == 4.5
    assert again.call_counts == {"k": 2}
    assert again.plan.items[0].status == "completed"


async def test_one_log_line_per_thought_action_and_observation_with_step() -> None:
    model = ScriptedModel([says("hmm", call("echo")), finish()])
    with capture_logs(processors=[merge_contextvars]) as logs:
        await collect(run_react(task="t", model=model, tools=[echo_tool()], run_id="run_1"))
    assert {(e["event"], e["step"]) for e in logs if e["event"] != "run_finished"} == {
        ("thought_emitted", 1),
        ("tool_called", 1),
        ("tool_returned", 1),
        ("tool_called", 2),
    }
    assert {e["run_id"] for e in logs} == {"run_1"}
    names = [e["event"] for e in logs]
    assert names.count("thought_emitted") == 1
    assert names.count("tool_called") == 2  # echo, then task_finished
    assert names.count("tool_returned") == 1
