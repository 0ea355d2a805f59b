"""Sub-agent calls in the loop (DESIGN §15), against a fake `SubAgents` port: the tool the
model is offered, the observation of each way a child ends, concurrent children, one budget
for the tree (time, tokens, cost shared out, a child's spend counted, its budget stop
passed up), refusals, and the parent's slot lent while it waits on children alone."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from app.engine.delegating import (
    AgentTool,
    ChildCall,
    ChildOutcome,
    ChildRefusedError,
    ChildStarter,
)
from app.engine.loop import run_react
from app.engine.policies import Limits, StopReason
from app.engine.ports import Reply
from app.engine.steps import AgentFinished, AgentStarted, Finished, Observation, RunUsage
from app.llm.scripted import ScriptedModel
from tests.engine.kit import call, collect, echo_tool, finish, says


@dataclass
class FakeChild:
    run_id: str
    result: ChildOutcome | None = None
    released: asyncio.Event = field(default_factory=asyncio.Event)
    stopped: bool = False

    async def outcome(self) -> ChildOutcome:
        await self.released.wait()
        assert self.result is not None
        return self.result

    def stop(self) -> None:
        self.stopped = True

    def end(self, outcome: ChildOutcome) -> None:
        self.result = outcome
        self.released.set()


@dataclass
class FakeChildren:
    """A `SubAgents` that starts children the test ends, recording what it was asked."""

    outcomes: dict[str, ChildOutcome] = field(default_factory=dict)
    refuse: ChildRefusedError | None = None
    calls: list[ChildCall] = field(default_factory=list)
    started: dict[str, FakeChild] = field(default_factory=dict)
    lent: list[str] = field(default_factory=list)
    lending: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self, child: ChildCall) -> FakeChild:
        if self.refuse is not None:
            raise self.refuse
        self.calls.append(child)
        made = FakeChild(f"run_child_{len(self.calls)}")
        self.started[child.call_id] = made
        if child.task in self.outcomes:
            made.end(self.outcomes[child.task])
        return made

    def lend(self) -> None:
        self.lent.append("lend")
        self.lending.set()

    def reclaim(self) -> None:
        self.lent.append("reclaim")


def done(answer: str = "4", **fields: object) -> ChildOutcome:
    return ChildOutcome("completed", "finished", answer, **fields)  # type: ignore[arg-type]


def agent(name: str = "calc", remote: ChildStarter | None = None) -> AgentTool:
    return AgentTool(name, "Computes arithmetic.", remote)


def delegate(task: str, name: str = "calc", call_id: str | None = None) -> Reply:
    return says(None, call(name, {"task": task}, call_id))


async def run(
    replies: list[Reply],
    children: FakeChildren,
    limits: Limits | None = None,
    tools: list | None = None,
) -> tuple[list, ScriptedModel]:
    model = ScriptedModel(replies)
    steps = await collect(
        run_react(
            task="route it",
            model=model,
            tools=tools or [agent()],
            limits=limits or Limits(),
            subagents=children,
        )
    )
    return steps, model


def observations(steps: list) -> list[Observation]:
    return [s for s in steps if isinstance(s, Observation)]


async def test_an_agent_is_offered_as_a_tool_of_one_task_parameter_with_its_description() -> None:
    model = ScriptedModel([finish("ok")])
    await collect(run_react(task="t", model=model, tools=[agent()], subagents=FakeChildren()))
    assert model.calls[0].tools == ["calc", "task_finished"]
    tool = agent()
    assert tool.description == "Computes arithmetic."
    assert tool.parameters["required"] == ["task"]
    assert tool.validate({"task": "2+2"}) is None
    assert "task" in (tool.validate({}) or "")
    assert "only 'task'" in (tool.validate({"task": "x", "other": 1}) or "")


async def test_the_observation_is_the_childs_answer_verbatim_and_one_status_line() -> None:
    children = FakeChildren(outcomes={"2+2": done("  4\n  (exactly)")})
    steps, model = await run([delegate("2+2"), finish("4")], children)
    started = [s for s in steps if isinstance(s, AgentStarted)]
    ended = [s for s in steps if isinstance(s, AgentFinished)]
    assert [(s.agent, s.child_run_id) for s in started] == [("calc", "run_child_1")]
    assert [(s.status, s.reason) for s in ended] == [("completed", "finished")]
    (seen,) = observations(steps)
    assert seen.content.startswith("  4\n  (exactly)\n\n[Sub-agent calc (run run_child_1)")
    assert seen.content.count("\n") == 3
    assert not seen.is_error
    assert model.calls[1].messages[-1]["content"] == seen.content
    assert steps.index(started[0]) < steps.index(ended[0]) < steps.index(seen)


@pytest.mark.parametrize(
    ("outcome", "is_error", "words"),
    [
        (
            ChildOutcome("failed", "error", error="the model is down"),
            True,
            "failed: the model is down",
        ),
        (ChildOutcome("cancelled", "cancelled"), True, "was cancelled"),
        (
            ChildOutcome("incomplete", "timeout", "best so far", degraded=True),
            False,
            "best answer so far",
        ),
        (ChildOutcome("incomplete", "max_steps"), False, "without an answer: max_steps"),
    ],
)
async def test_how_a_child_ended_is_in_its_observation(
    outcome: ChildOutcome, is_error: bool, words: str
) -> None:
    steps, _ = await run([delegate("x"), finish()], FakeChildren(outcomes={"x": outcome}))
    (seen,) = observations(steps)
    assert seen.is_error is is_error
    assert words in seen.content


async def test_calls_of_one_step_run_together_and_the_slot_is_lent_while_children_alone_wait() -> (
    None
):
    children = FakeChildren()
    reply = says(None, call("calc", {"task": "a"}), call("calc", {"task": "b"}), call("echo", {}))
    run_task = asyncio.ensure_future(run([reply, finish()], children, tools=[agent(), echo_tool()]))
    await children.lending.wait()  # the echo is back: only the two children are left
    assert len(children.started) == 2  # both started, neither ended: they run together
    first, second = children.started.values()
    second.end(done("B"))
    first.end(done("A"))
    steps, _ = await run_task
    calc = [o for o in observations(steps) if o.tool == "calc"]
    assert sorted(o.content.split("\n")[0] for o in calc) == ["A", "B"]
    assert children.lent.count("lend") == children.lent.count("reclaim")
    assert children.lent[-1] == "reclaim"  # it went on holding its slot


async def test_the_deadline_bounds_a_child_that_would_run_forever_and_stops_it() -> None:
    children = FakeChildren()  # no outcome: the child never ends
    limits = Limits(max_time_s=0.3, tool_timeout_s=0.05, final_answer_timeout_s=1)
    steps, _ = await run([delegate("forever"), says("best I have")], children, limits)
    finished = steps[-1]
    assert isinstance(finished, Finished)
    assert finished.reason == StopReason.TIMEOUT
    (seen,) = observations(steps)
    assert seen.is_error
    assert "interrupted" in seen.content
    assert children.started[next(iter(children.started))].stopped
    assert children.calls[0].time_left_s <= 0.3


async def test_a_child_gets_its_share_of_what_the_run_has_left_and_its_spend_counts() -> None:
    spent = RunUsage(steps=2, llm_calls=2, prompt_tokens=300, completion_tokens=20, cost_usd=0.5)
    children = FakeChildren(outcomes={"a": done(usage=spent), "b": done(usage=spent)})
    limits = Limits(max_total_tokens=10_000, max_cost_usd=10.0)
    reply = says(None, call("calc", {"task": "a"}), call("calc", {"task": "b"}), tokens=(1000, 0))
    steps, _ = await run(
        [reply, says(None, call("task_finished", {"answer": "ok"}), tokens=(10, 5))],
        children,
        limits,
    )
    first, second = children.calls
    assert first.tokens_left == second.tokens_left == (10_000 - 1000) // 2
    assert first.cost_left_usd == second.cost_left_usd == 5.0
    finished = steps[-1]
    assert isinstance(finished, Finished)
    usage = finished.usage
    assert usage.children is not None
    assert usage.children.prompt_tokens == 600
    assert usage.children.steps == 4
    assert usage.prompt_tokens >= 1000 + 600
    assert usage.cost_usd == 1.0
    assert usage.steps == 2  # its own turns


async def test_the_trees_tokens_end_the_run_when_spent_by_its_children() -> None:
    spent = RunUsage(llm_calls=1, prompt_tokens=900, completion_tokens=100)
    children = FakeChildren(outcomes={"a": done(usage=spent)})
    limits = Limits(max_total_tokens=1000)
    steps, _ = await run([delegate("a"), says("from what I have")], children, limits)
    finished = steps[-1]
    assert isinstance(finished, Finished)
    assert finished.reason == StopReason.TOKEN_BUDGET
    assert finished.answer == "from what I have"


async def test_a_child_ending_on_the_trees_budget_ends_its_parent_with_the_same_reason() -> None:
    stopped = ChildOutcome(
        "incomplete", "cost_budget", "half", degraded=True, tree_limit="cost_budget"
    )
    children = FakeChildren(outcomes={"a": stopped})
    steps, _ = await run([delegate("a"), says("what I have")], children, Limits(max_cost_usd=1.0))
    finished = steps[-1]
    assert isinstance(finished, Finished)
    assert finished.reason == StopReason.COST_BUDGET


@pytest.mark.parametrize(
    ("refusal", "words"),
    [
        (ChildRefusedError("depth", "too deep", limit=2), "no deeper than depth 2"),
        (ChildRefusedError("runs", "too many", limit=20), "the 20 sub-agent runs"),
        (ChildRefusedError("unavailable", "the queue is full"), "the queue is full"),
    ],
)
async def test_a_child_that_cannot_start_is_an_error_the_model_sees_never_a_hang(
    refusal: ChildRefusedError, words: str
) -> None:
    steps, _model = await run([delegate("x"), finish()], FakeChildren(refuse=refusal))
    (seen,) = observations(steps)
    assert seen.is_error
    assert words in seen.content
    assert not [s for s in steps if isinstance(s, AgentStarted)]
    assert isinstance(steps[-1], Finished)
    assert steps[-1].reason == StopReason.FINISHED


async def test_without_a_port_an_agent_call_is_an_error_observation() -> None:
    model = ScriptedModel([delegate("x"), finish()])
    steps = await collect(run_react(task="t", model=model, tools=[agent()]))
    (seen,) = observations(steps)
    assert seen.is_error
    assert "could not be started" in seen.content


async def test_a_remote_agent_is_started_by_its_own_starter() -> None:
    remote = FakeChildren(outcomes={"x": done("from afar")})
    local = FakeChildren()
    steps, _ = await run([delegate("x"), finish()], local, tools=[agent(remote=remote)])
    (seen,) = observations(steps)
    assert seen.content.startswith("from afar")
    assert local.calls == []
    assert len(remote.calls) == 1
