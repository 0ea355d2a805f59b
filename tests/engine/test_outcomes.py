"""Outcomes in the engine (DESIGN §22): an answer graded against a rubric in a context of its
own; unmet, the feedback goes back and the run goes on; after max_revisions unmet revisions
the run ends outcome_unmet with its last answer; an invalid verdict is retried, then unmet;
a run resumed after a verdict does not ask for it again. (Over HTTP, with the fake LLM, on
every store: tests/api/test_runs_outcomes.py.)"""

from __future__ import annotations

import json
from typing import Any

from app.engine.grading import Outcome
from app.engine.loop import run_react
from app.engine.policies import InterventionKind, Limits, StopReason
from app.engine.ports import Reply, ToolSpec
from app.engine.prompts import SUBMIT_VERDICT
from app.engine.state import RunState
from app.engine.steps import Checkpoint, Intervention, LLMCalled, LLMRetry, OutcomeGraded
from app.llm.scripted import FunctionModel, ScriptedModel
from tests.engine.kit import call, collect, ending, finish, of_type, says

RUBRIC = "The answer names a colour."


def verdict(satisfied: bool, feedback: str = "") -> Reply:
    return says(None, call(SUBMIT_VERDICT, {"satisfied": satisfied, "feedback": feedback}))


async def test_an_unmet_answer_gets_its_feedback_and_the_revision_ends_the_run() -> None:
    grader = ScriptedModel([verdict(False, "no colour"), verdict(True, "red is a colour")])
    model = ScriptedModel([finish("a shape"), finish("red")])
    steps = await collect(run_react(task="t", model=model, outcome=Outcome(RUBRIC, model=grader)))
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.FINISHED, "red", False)
    graded = of_type(steps, OutcomeGraded)
    assert [(g.satisfied, g.feedback, g.revision) for g in graded] == [
        (False, "no colour", 0),
        (True, "red is a colour", 1),
    ]
    told = [i for i in of_type(steps, Intervention) if i.kind == InterventionKind.OUTCOME_UNMET]
    assert len(told) == 1
    assert "no colour" in told[0].message
    assert end.usage.llm_calls == 4  # two answers, two verdicts
    sent = grader.calls[0].messages
    assert [m["role"] for m in sent] == ["system", "user"]  # a context of its own
    assert RUBRIC in sent[1]["content"]
    assert "a shape" in sent[1]["content"]
    # the model saw the feedback as task_finished's result
    second = model.calls[1].messages
    assert second[-1]["role"] == "tool"
    assert "no colour" in second[-1]["content"]


async def test_never_met_ends_outcome_unmet_with_the_last_answer_degraded() -> None:
    model = ScriptedModel([finish("a"), finish("b")])
    grader = ScriptedModel([verdict(False, "no"), verdict(False, "still no")])
    limits = Limits(max_revisions=1)
    steps = await collect(
        run_react(task="t", model=model, limits=limits, outcome=Outcome(RUBRIC, model=grader))
    )
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.OUTCOME_UNMET, "b", True)
    assert [g.revision for g in of_type(steps, OutcomeGraded)] == [0, 1]


async def test_an_invalid_verdict_is_retried_then_counts_unmet() -> None:
    model = ScriptedModel([finish("a")])
    bad = says("I think it is fine")
    grader = ScriptedModel([bad, bad])
    limits = Limits(max_revisions=0, llm_retries=1)
    steps = await collect(
        run_react(task="t", model=model, limits=limits, outcome=Outcome(RUBRIC, model=grader))
    )
    end = ending(steps)
    assert end.reason == StopReason.OUTCOME_UNMET
    (graded,) = of_type(steps, OutcomeGraded)
    assert (graded.satisfied, graded.valid) == (False, False)
    assert len(of_type(steps, LLMRetry)) == 1


async def test_a_plain_answer_is_graded_and_the_feedback_is_a_user_message() -> None:
    def reply(messages: list[Any], tools: list[ToolSpec]) -> Reply:
        if tools and tools[0].name == SUBMIT_VERDICT:
            answer = messages[-1]["content"]
            return verdict("blue" in answer, "say blue")
        told = messages[-1]["role"] == "user" and "say blue" in messages[-1]["content"]
        return says("blue" if told else "grey")

    limits = Limits(stop_tool=False)
    steps = await collect(
        run_react(task="t", model=FunctionModel(reply), limits=limits, outcome=Outcome(RUBRIC))
    )
    end = ending(steps)
    assert (end.reason, end.answer) == (StopReason.ANSWERED, "blue")


async def test_a_run_resumed_after_a_verdict_does_not_ask_for_it_again() -> None:
    grader = ScriptedModel([verdict(False, "no colour")])
    model = ScriptedModel([finish("a shape")])
    steps = run_react(task="t", model=model, outcome=Outcome(RUBRIC, model=grader))
    checkpoint = None
    async for step in steps:
        if isinstance(step, Checkpoint):
            checkpoint = step
            break
    await steps.aclose()
    assert checkpoint is not None
    assert json.loads(json.dumps(checkpoint.state))["revisions"] == 1

    grader = ScriptedModel([verdict(True, "red")])
    model = ScriptedModel([finish("a shape"), finish("red")])  # restored to its second reply
    state = RunState.from_checkpoint(checkpoint.state)
    resumed = await collect(
        run_react(task="t", model=model, outcome=Outcome(RUBRIC, model=grader), state=state)
    )
    end = ending(resumed)
    assert (end.reason, end.answer) == (StopReason.FINISHED, "red")
    assert [g.revision for g in of_type(resumed, OutcomeGraded)] == [1]  # the new answer's
    assert len(of_type(resumed, LLMCalled)) == 2


async def test_a_met_verdict_in_the_checkpoint_ends_a_resumed_run_without_a_call() -> None:
    grader = ScriptedModel([verdict(True, "fine")])
    model = ScriptedModel([finish("red")])
    steps = run_react(task="t", model=model, outcome=Outcome(RUBRIC, model=grader))
    checkpoint = None
    async for step in steps:
        if isinstance(step, Checkpoint):
            checkpoint = step
            break
    await steps.aclose()
    assert checkpoint is not None
    assert checkpoint.state["verdict"]["satisfied"] is True

    state = RunState.from_checkpoint(checkpoint.state)
    nobody = ScriptedModel([])
    resumed = await collect(
        run_react(task="t", model=nobody, outcome=Outcome(RUBRIC, model=nobody), state=state)
    )
    end = ending(resumed)
    assert (end.reason, end.answer) == (StopReason.FINISHED, "red")
    assert of_type(resumed, LLMCalled) == []
    assert of_type(resumed, OutcomeGraded) == []


async def test_every_finish_call_of_an_unmet_reply_gets_the_feedback_as_its_result() -> None:
    twice = says(
        None, call("task_finished", {"answer": "a"}), call("task_finished", {"answer": "b"})
    )
    model = ScriptedModel([twice, finish("red")])
    grader = ScriptedModel([verdict(False, "no colour"), verdict(True, "red")])
    steps = await collect(run_react(task="t", model=model, outcome=Outcome(RUBRIC, model=grader)))
    assert ending(steps).answer == "red"
    sent = model.calls[1].messages
    ids = [c["id"] for c in sent[-3]["tool_calls"]]
    assert [(m["role"], m["tool_call_id"]) for m in sent[-2:]] == [("tool", i) for i in ids]
