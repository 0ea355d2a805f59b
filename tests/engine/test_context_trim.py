"""`max_context_tokens` over a follow-up's inherited history (DESIGN §2, §10): the oldest
inherited tool results are elided first; when that is not enough the oldest inherited turns
are dropped whole (a tool-call exchange is never split); then the run's own oldest tool
results are elided. The system prompt and the run's own task and steps are kept, and the
`context_trim` intervention says what was elided and dropped."""

from __future__ import annotations

import re
from typing import Any

from app.engine.history import PreviousRun, follow_up_messages
from app.engine.loop import run_react
from app.engine.policies import InterventionKind, Limits, StopReason
from app.engine.prompts import EN
from app.engine.specs import tool_specs
from app.engine.state import RunState
from app.engine.steps import Checkpoint, Intervention
from app.engine.tokens import estimate_tokens
from app.engine.trim import Trimmed, trim_context
from app.llm.scripted import ScriptedModel
from tests.engine.kit import call, collect, echo_tool, ending, finish, of_type, says


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def calls(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "echo", "arguments": "{}"}}
            for i in ids
        ],
    }


def result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


BIG = "r" * 800  # 200 tokens
SYSTEM = {"role": "system", "content": "sys"}
OLD_TURN = [user("first task"), calls("c1"), result("c1", BIG), answer("first answer")]
NEWER_TURN = [user("second task"), answer("second answer")]
OWN = [user("the task"), calls("c2"), result("c2", BIG)]


def follow_up_state(*, elided: set[int] | None = None) -> RunState:
    state = RunState(messages=[SYSTEM, *OLD_TURN, *NEWER_TURN, *OWN], inherited=6)
    state.elided = set(elided or ())
    return state


def test_when_eliding_is_not_enough_the_oldest_inherited_turn_is_dropped_whole() -> None:
    state = follow_up_state()
    budget = estimate_tokens([SYSTEM, *NEWER_TURN, *OWN])  # the old turn must go

    trimmed = trim_context(state, budget, EN)

    # its tool result was elided first, then the turn went whole: told as dropped only
    assert trimmed == Trimmed(elided=0, turns=1, messages=4)
    assert state.messages == [SYSTEM, *NEWER_TURN, *OWN]  # the run's own result is whole
    assert (state.inherited, state.elided) == (2, set())
    assert state.prompt_estimate == estimate_tokens(state.messages)


def test_the_runs_own_tool_results_are_elided_only_once_no_inherited_turn_is_left() -> None:
    state = follow_up_state()

    trimmed = trim_context(state, 10, EN)  # nothing fits: all that may go goes

    assert trimmed == Trimmed(elided=1, turns=2, messages=6)
    stub = EN.context_trim_stub.format(tool="echo", chars=len(BIG))
    assert state.messages == [SYSTEM, *OWN[:2], result("c2", stub)]  # system, task, steps
    assert (state.inherited, state.elided) == (0, {3})
    assert state.prompt_estimate == estimate_tokens(state.messages)


def test_a_dropped_turn_moves_the_indexes_of_the_results_elided_before() -> None:
    stub = EN.context_trim_stub.format(tool="echo", chars=len(BIG))
    state = follow_up_state(elided={9})  # the run's own result, elided at an earlier step
    state.replace(9, result("c2", stub))
    budget = estimate_tokens([SYSTEM, *NEWER_TURN, *OWN[:2], result("c2", stub)])

    assert trim_context(state, budget, EN) == Trimmed(elided=0, turns=1, messages=4)

    assert state.elided == {5}
    assert state.messages[5] == result("c2", stub)


def test_a_tool_call_exchange_is_never_split_even_by_a_user_message() -> None:
    # a user message between a call and its result (steering while calls were in flight)
    # does not begin a turn: the exchange goes whole with the turn it is in
    exchange = [user("first task"), calls("c1"), user("hurry"), result("c1", BIG), answer("a")]
    state = RunState(messages=[SYSTEM, *exchange, *NEWER_TURN, *OWN], inherited=7)

    trimmed = trim_context(state, estimate_tokens([SYSTEM, *NEWER_TURN, *OWN]), EN)

    assert (trimmed.turns, trimmed.messages) == (1, 5)
    assert state.messages == [SYSTEM, *NEWER_TURN, *OWN]


def test_a_prompt_under_the_budget_is_left_alone() -> None:
    state = follow_up_state()
    before = list(state.messages)
    assert trim_context(state, 10_000, EN) == Trimmed()
    assert state.messages == before


def shape(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """Each message's role and content, a tool result's call id instead of its content."""
    return [
        (m["role"], m["tool_call_id"] if m["role"] == "tool" else m.get("content"))
        for m in messages
    ]


def exchanges_whole(messages: list[dict[str, Any]]) -> bool:
    """Every tool message answers a call made before it, and every call is answered."""
    asked: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            if message["tool_call_id"] not in asked:
                return False
            answered.add(message["tool_call_id"])
        for made in message.get("tool_calls") or ():
            asked.add(made["id"])
    return asked == answered


async def test_a_long_chain_of_follow_ups_sends_every_prompt_under_max_context_tokens() -> None:
    limit = 1500
    echo = echo_tool()
    spec_tokens = tool_specs([echo], True, EN)[1]
    previous: PreviousRun | None = None
    dropped_at_some_point = False
    for index in range(40):
        task = f"task {index}: " + "t" * 400
        model = ScriptedModel(
            [says(None, call("echo", {"text": "e" * 400})), finish(f"answer {index} " + "a" * 400)]
        )
        steps = await collect(
            run_react(
                task=task,
                model=model,
                tools=[echo],
                system_prompt="You are terse.",
                previous=previous,
                limits=Limits(max_context_tokens=limit),
            )
        )
        end = ending(steps)
        assert end.reason == StopReason.FINISHED

        for sent in (c.messages for c in model.calls):
            assert estimate_tokens(sent) + spec_tokens <= limit  # what the engine estimates
            assert sent[0]["role"] == "system"
            assert sent[0]["content"].startswith("You are terse.")
            assert exchanges_whole(sent)
        first, last = model.calls[0].messages, model.calls[-1].messages
        assert first[-1] == user(task)  # the run's own task, and then its own steps, whole
        own = last.index(user(task))
        assert last[own + 1]["tool_calls"][0]["function"]["name"] == "echo"
        assert last[own + 2] == result(last[own + 1]["tool_calls"][0]["id"], "echo: " + "e" * 400)

        # what was dropped is what the interventions say, counted in messages
        inherited = follow_up_messages(previous, EN) if previous is not None else []
        kept = own - 1  # between the system prompt and the task
        notices = [
            i.message
            for i in of_type(steps, Intervention)
            if i.kind == InterventionKind.CONTEXT_TRIM
        ]
        said = sum(int(n) for m in notices for n in re.findall(r"\((\d+) messages\)", m))
        assert said == len(inherited) - kept
        if said:
            dropped_at_some_point = True
            # the newest messages are kept (their tool results maybe elided)
            assert shape(last[1 : 1 + kept]) == shape(inherited[len(inherited) - kept :])
            assert last[1]["role"] == "user"  # a whole turn begins the history

        final = of_type(steps, Checkpoint)[-1].state
        previous = PreviousRun(RunState.from_checkpoint(final).messages, end.answer, "finished")
    assert dropped_at_some_point
