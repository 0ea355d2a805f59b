"""Steering: messages people send a live run join the conversation right before its next LLM
call, never inside a tool-call exchange, in the order they were sent."""

from __future__ import annotations

from typing import Any

from app.engine.loop import run_react
from app.engine.policies import InterventionKind, Limits, StopReason
from app.engine.ports import ToolContext
from app.engine.steps import Intervention, LLMCalled, Observation, UserMessage
from app.llm.scripted import FunctionModel, ScriptedModel
from tests.engine.kit import FnTool, call, collect, ending, finish, of_type, says


class Inbox:
    """What the runs layer hands the engine: a list taken whole at each poll."""

    def __init__(self, *messages: str) -> None:
        self.waiting = list(messages)
        self.polls = 0

    def __call__(self) -> list[str]:
        self.polls += 1
        taken, self.waiting = self.waiting, []
        return taken


def roles(messages: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in messages]


async def test_a_message_waiting_at_the_start_follows_the_task_before_the_first_call() -> None:
    inbox = Inbox("use metric units")
    model = ScriptedModel([finish()])

    steps = await collect(run_react(task="the task", model=model, inbox=inbox))

    assert model.calls[0].messages[-2:] == [
        {"role": "user", "content": "the task"},
        {"role": "user", "content": "use metric units"},
    ]
    (said,) = of_type(steps, UserMessage)
    assert (said.step, said.content, said.delivered) == (1, "use metric units", True)
    assert steps.index(said) < steps.index(of_type(steps, LLMCalled)[0])


async def test_a_message_sent_during_tool_calls_lands_after_every_result_of_the_step() -> None:
    inbox = Inbox()

    def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        inbox.waiting.append("stop after this")
        return "a"

    tools = [FnTool("a", slow), FnTool("b", lambda args, ctx: "b")]
    model = ScriptedModel([says(None, call("a"), call("b")), finish()])

    steps = await collect(run_react(task="t", model=model, tools=tools, inbox=inbox))

    second = model.calls[1].messages
    assert roles(second)[-4:] == ["assistant", "tool", "tool", "user"]
    assert second[-1] == {"role": "user", "content": "stop after this"}
    said = of_type(steps, UserMessage)[0]
    assert said.step == 2
    assert steps.index(said) > steps.index(of_type(steps, Observation)[-1])


async def test_several_messages_keep_their_order() -> None:
    inbox = Inbox("first", "second")
    model = ScriptedModel([says(None, call("echo")), finish()])
    tool = FnTool("echo", lambda args, ctx: inbox.waiting.append("third") or "ok")

    steps = await collect(run_react(task="t", model=model, tools=[tool], inbox=inbox))

    assert [s.content for s in of_type(steps, UserMessage)] == ["first", "second", "third"]
    contents = [m["content"] for m in model.calls[1].messages if m["role"] == "user"]
    assert contents == ["t", "first", "second", "third"]


def scripted_then(inbox: Inbox, replies: list[Any], *, at_call: int, say: str) -> FunctionModel:
    """Replies in order; as call `at_call` returns, a person sends `say`."""

    def reply(messages: list[Any], tools: list[Any]) -> Any:
        index = len(model.calls) - 1
        if index + 1 == at_call:
            inbox.waiting.append(say)
        return replies[index]

    model = FunctionModel(reply)
    return model


async def test_a_message_replaces_the_stop_prompt_of_its_step() -> None:
    inbox = Inbox()
    model = scripted_then(
        inbox, [says("I am done, I think"), finish()], at_call=1, say="also list the sources"
    )

    steps = await collect(run_react(task="t", model=model, inbox=inbox))

    assert of_type(steps, Intervention) == []
    assert model.calls[1].messages[-1] == {"role": "user", "content": "also list the sources"}
    assert ending(steps).reason == StopReason.FINISHED


async def test_a_waiting_message_keeps_a_run_past_its_nudge_limit() -> None:
    inbox = Inbox()
    replies = [says("plain 1"), says("plain 2"), finish("after the message")]
    model = scripted_then(inbox, replies, at_call=2, say="keep going")  # 1 nudge, now spent

    steps = await collect(
        run_react(task="t", model=model, limits=Limits(max_nudges=1), inbox=inbox)
    )

    assert (ending(steps).reason, ending(steps).answer) == (
        StopReason.FINISHED,
        "after the message",
    )
    assert [i.kind for i in of_type(steps, Intervention)] == [InterventionKind.STOP_PROMPT]


async def test_without_a_message_the_nudge_limit_still_ends_the_run() -> None:
    inbox = Inbox()
    model = ScriptedModel([says("plain 1"), says("plain 2")])

    steps = await collect(
        run_react(task="t", model=model, limits=Limits(max_nudges=1), inbox=inbox)
    )

    assert ending(steps).reason == StopReason.NUDGE_LIMIT
    assert of_type(steps, UserMessage) == []


async def test_a_message_sent_after_the_last_llm_call_is_left_for_the_caller() -> None:
    inbox = Inbox()
    model = scripted_then(inbox, [says("the answer")], at_call=1, say="too late")

    steps = await collect(
        run_react(task="t", model=model, limits=Limits(stop_tool=False), inbox=inbox)
    )

    assert ending(steps).reason == StopReason.ANSWERED
    assert of_type(steps, UserMessage) == []
    assert inbox.waiting == ["too late"]
