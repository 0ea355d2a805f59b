"""Follow-ups: a run that starts from a previous run's conversation, made whole again."""

from __future__ import annotations

from typing import Any

from app.engine.history import PreviousRun, follow_up_messages
from app.engine.loop import run_react
from app.engine.policies import Limits, StopReason
from app.engine.prompts import EN, ZH
from app.engine.state import RunState
from app.engine.steps import Checkpoint, Finished
from app.llm.scripted import ScriptedModel
from tests.engine.kit import call, collect, echo_tool, ending, finish, of_type, says


def assistant_calls(*calls: tuple[str, str]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}
            for cid, name in calls
        ],
    }


def tool(cid: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": content}


SYSTEM = {"role": "system", "content": "old system"}
TASK = {"role": "user", "content": "first task"}


async def finished_run_messages() -> tuple[list[dict[str, Any]], Finished]:
    """The final conversation of a real run: a tool call, then task_finished."""
    model = ScriptedModel([says(None, call("echo", {"text": "x"})), finish("forty-two")])
    steps = await collect(run_react(task="first task", model=model, tools=[echo_tool()]))
    final = of_type(steps, Checkpoint)[-1]
    return RunState.from_checkpoint(final.state).messages, ending(steps)


async def test_the_final_conversation_is_checkpointed_before_the_run_ends() -> None:
    messages, end = await finished_run_messages()
    assert end.reason == StopReason.FINISHED
    last = messages[-1]
    assert last["role"] == "assistant"
    assert last["tool_calls"][0]["function"]["name"] == "task_finished"


async def test_a_follow_up_replaces_task_finished_with_a_plain_answer() -> None:
    messages, _ = await finished_run_messages()

    history = follow_up_messages(PreviousRun(messages, "forty-two", "finished"), EN)

    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[0] == TASK
    assert history[-1] == {"role": "assistant", "content": "forty-two"}
    assert all(
        c["function"]["name"] != "task_finished" for m in history for c in m.get("tool_calls", [])
    )


def test_unanswered_calls_are_dropped_and_their_text_kept() -> None:
    messages = [
        SYSTEM,
        TASK,
        {**assistant_calls(("a", "echo"), ("b", "echo")), "content": "checking"},
        tool("a", "ra"),
        {**assistant_calls(("c", "echo")), "content": "one more"},
    ]

    history = follow_up_messages(PreviousRun(messages, None, "cancelled"), EN)

    assert history[1]["tool_calls"] == [messages[2]["tool_calls"][0]]
    assert history[2] == tool("a", "ra")
    assert history[3:] == [{"role": "assistant", "content": "one more"}]


def test_a_run_without_an_answer_contributes_its_last_assistant_text() -> None:
    messages = [TASK, {"role": "assistant", "content": "halfway"}, assistant_calls(("a", "x"))]

    history = follow_up_messages(PreviousRun(messages, None, "max_steps"), EN)

    assert history == [TASK, {"role": "assistant", "content": "halfway"}]


def test_a_run_without_any_assistant_text_contributes_a_note_of_how_it_ended() -> None:
    for prompts in (EN, ZH):
        history = follow_up_messages(PreviousRun([SYSTEM, TASK], None, "timeout"), prompts)
        note = prompts.previous_run_ended.format(reason="timeout")
        assert history == [TASK, {"role": "assistant", "content": note}]
        assert "timeout" in note


async def test_a_follow_up_run_sends_its_system_prompt_then_history_then_the_new_task() -> None:
    messages, _ = await finished_run_messages()
    model = ScriptedModel([says("eighty-four")])

    steps = await collect(
        run_react(
            task="now double it",
            model=model,
            system_prompt="new system",
            previous=PreviousRun(messages, "forty-two", "finished"),
            limits=Limits(stop_tool=False),
        )
    )

    sent = model.calls[0].messages
    assert sent[0] == {"role": "system", "content": "new system"}
    assert sent[1] == TASK
    assert sent[-2:] == [
        {"role": "assistant", "content": "forty-two"},
        {"role": "user", "content": "now double it"},
    ]
    assert ending(steps).reason == StopReason.ANSWERED


async def test_context_trimming_reaches_into_the_inherited_history() -> None:
    big = "x" * 4000
    messages = [
        TASK,
        assistant_calls(("a", "echo")),
        tool("a", big),
        {"role": "assistant", "content": "done"},
    ]
    model = ScriptedModel([says("ok")])

    steps = await collect(
        run_react(
            task="next",
            model=model,
            previous=PreviousRun(messages, "done", "finished"),
            limits=Limits(stop_tool=False, max_context_tokens=300),
        )
    )

    sent = model.calls[0].messages
    inherited = next(m for m in sent if m["role"] == "tool")
    assert inherited["content"] == EN.context_trim_stub.format(tool="echo", chars=len(big))
    assert ending(steps).reason == StopReason.ANSWERED
