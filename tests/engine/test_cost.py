"""What a run costs (DESIGN §13): each LLM call priced from its usage at the model's price, the
run's sum, null when the model has no price, and `max_cost_usd` ending the run with
`cost_budget` after a call that reaches it, or before a call whose prompt alone would pass it.

The price here is a plain `Price` (what app.llm.pricing resolves from genai-prices): the
engine only multiplies."""

from __future__ import annotations

import pytest

from app.engine.loop import run_react
from app.engine.policies import InterventionKind, Limits, StopReason
from app.engine.ports import FREE, Price, Rates, Reply, TokenUsage
from app.engine.prompts import BUILTIN
from app.engine.replycap import CappedModel
from app.engine.state import RunState
from app.engine.steps import Checkpoint, Intervention, LLMCalled
from app.llm.scripted import FunctionModel, ScriptedModel
from app.tools.plan import UpdatePlanTool
from tests.engine.kit import call, collect, echo_tool, ending, finish, of_type, says

PRICE = Price(Rates(input=2.0, output=10.0, cached_input=0.5))
"""USD per million tokens: 1,000 prompt tokens cost $0.002, 100 completion tokens $0.001."""


def used(prompt: int, completion: int, cached: int = 0) -> TokenUsage:
    return TokenUsage(prompt, completion, cached_tokens=cached)


def echo(i: int, usage: TokenUsage) -> Reply:
    return Reply(tool_calls=(call("echo", {"text": str(i)}),), usage=usage)


def done(usage: TokenUsage) -> Reply:
    return Reply(tool_calls=finish().tool_calls, usage=usage)


async def test_each_call_is_priced_from_its_usage_and_the_run_costs_their_sum() -> None:
    model = ScriptedModel(
        [echo(1, used(1000, 100)), done(used(3000, 50, cached=2000))], price=PRICE
    )
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()]))
    calls = of_type(steps, LLMCalled)
    # 1000 * 2 + 100 * 10 = 3000 µ$; (1000 * 2 + 2000 * 0.5) + 50 * 10 = 3500 µ$
    assert [c.cost_usd for c in calls] == [0.003, 0.0035]
    assert [c.cached_tokens for c in calls] == [0, 2000]
    assert calls[1].payload()["cost_usd"] == 0.0035
    end = ending(steps)
    assert end.reason == StopReason.FINISHED
    assert end.usage.cost_usd == 0.0065
    assert end.usage.to_dict()["cost_usd"] == 0.0065


async def test_a_model_without_a_price_costs_null_per_call_and_per_run() -> None:
    model = ScriptedModel([echo(1, used(1000, 100)), done(used(1000, 10))], price=None)
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()]))
    assert [c.cost_usd for c in of_type(steps, LLMCalled)] == [None, None]
    assert ending(steps).usage.cost_usd is None  # never a guess


async def test_the_scripted_model_costs_nothing_unless_priced() -> None:
    model = ScriptedModel([done(used(10_000, 1000))])
    assert model.price == FREE
    steps = await collect(run_react(task="t", model=model))
    assert [c.cost_usd for c in of_type(steps, LLMCalled)] == [0.0]
    assert ending(steps).usage.cost_usd == 0.0


async def test_a_call_without_reported_usage_is_priced_from_its_estimate() -> None:
    model = ScriptedModel([says(None, call("task_finished", {"answer": "42"}))], price=PRICE)
    steps = await collect(run_react(task="What is 6*7?", model=model))
    (called,) = of_type(steps, LLMCalled)
    assert called.estimated
    expected = (called.prompt_tokens * 2.0 + called.completion_tokens * 10.0) / 1_000_000
    assert called.cost_usd == pytest.approx(expected, rel=1e-12)
    assert called.cost_usd > 0


async def test_a_tiered_price_charges_the_tier_of_the_prompts_size_on_every_token() -> None:
    tiered = Price(Rates(2.0, 10.0, 0.5), tiers=((200_000, Rates(4.0, 15.0, 1.0)),))
    model = ScriptedModel([echo(1, used(200_000, 100)), done(used(200_001, 100))], price=tiered)
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()]))
    costs = [c.cost_usd for c in of_type(steps, LLMCalled)]
    assert costs == [pytest.approx(0.401), pytest.approx(0.801504)]


async def test_the_run_ends_with_cost_budget_once_the_spend_reaches_it() -> None:
    replies = [echo(i, used(1000, 100)) for i in range(5)]  # $0.003 a call
    model = ScriptedModel([*replies[:2], says("my best answer", tokens=(2000, 10))], price=PRICE)
    limits = Limits(max_cost_usd=0.006)
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()], limits=limits))
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (
        StopReason.COST_BUDGET,
        "my best answer",
        True,
    )
    assert end.usage.steps == 2
    (limit,) = of_type(steps, Intervention)
    assert limit.kind == InterventionKind.COST_BUDGET
    assert "cost_budget" in limit.message
    final = of_type(steps, LLMCalled)[-1]
    assert final.final
    assert model.calls[-1].tools == []  # the degraded call offers no tools
    # the final call is allowed and counted, like token_budget's: the spend passes the budget
    assert end.usage.cost_usd == pytest.approx(0.006 + 0.0041)


async def test_a_run_under_its_cost_budget_goes_on() -> None:
    model = ScriptedModel([echo(1, used(1000, 100)), done(used(1000, 100))], price=PRICE)
    limits = Limits(max_cost_usd=0.0061)  # after the first call: $0.003 spent, a prompt ahead
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()], limits=limits))
    assert ending(steps).reason == StopReason.FINISHED
    assert ending(steps).usage.cost_usd == 0.006


async def test_the_run_ends_with_cost_budget_when_the_next_prompt_alone_would_pass_it() -> None:
    big = "x" * 40_000  # ~10,000 tokens by the run's estimator: $0.02 at the input rate
    model = ScriptedModel(
        [echo(1, used(100, 10)), says("best so far", tokens=(100, 10))], price=PRICE
    )
    tool = echo_tool()
    tool.fn = lambda args, ctx: big  # the first call's result makes the next prompt large
    limits = Limits(max_cost_usd=0.01, max_tool_result_chars=0)
    steps = await collect(run_react(task="t", model=model, tools=[tool], limits=limits))
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.COST_BUDGET, "best so far", True)
    # $0.0003 spent, far under the budget: it was the next prompt that would pass it
    assert of_type(steps, LLMCalled)[0].cost_usd == 0.0003
    assert end.usage.steps == 1
    assert len(model.calls) == 2  # no second step: the final call
    assert model.calls[1].tools == []


async def test_a_huge_task_ends_with_cost_budget_before_its_first_step() -> None:
    model = ScriptedModel([says("short answer", tokens=(100, 10))], price=PRICE)
    limits = Limits(max_cost_usd=0.001, final_answer_on_limit=False)
    steps = await collect(run_react(task="y" * 40_000, model=model, limits=limits))
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.COST_BUDGET, None, False)
    assert end.usage.steps == 0
    assert model.calls == []  # no call at all: final_answer_on_limit is off


async def test_the_look_ahead_counts_the_prompt_within_max_context_tokens() -> None:
    # the same large result, but the context cap elides it: the next prompt fits the budget
    model = ScriptedModel([echo(1, used(100, 10)), done(used(100, 10))], price=PRICE)
    tool = echo_tool()
    tool.fn = lambda args, ctx: "x" * 40_000
    limits = Limits(max_cost_usd=0.01, max_tool_result_chars=0, max_context_tokens=2000)
    steps = await collect(run_react(task="t", model=model, tools=[tool], limits=limits))
    assert ending(steps).reason == StopReason.FINISHED


async def test_without_a_budget_nothing_looks_ahead() -> None:
    model = ScriptedModel([done(used(100, 10))], price=PRICE)
    steps = await collect(run_react(task="y" * 400_000, model=model))
    assert ending(steps).reason == StopReason.FINISHED


async def test_cost_budget_without_a_final_answer_ends_with_no_answer() -> None:
    model = ScriptedModel([echo(1, used(1000, 100))], price=PRICE)
    limits = Limits(max_cost_usd=0.003, final_answer_on_limit=False)
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()], limits=limits))
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.COST_BUDGET, None, False)
    assert end.usage.cost_usd == 0.003


async def test_the_cost_survives_a_checkpoint_and_a_resume() -> None:
    model = ScriptedModel([echo(1, used(1000, 100))], price=PRICE)
    limits = Limits(max_steps=1, final_answer_on_limit=False)
    first = await collect(run_react(task="t", model=model, tools=[echo_tool()], limits=limits))
    state = RunState.from_checkpoint(of_type(first, Checkpoint)[-1].state)
    assert (state.cost_usd, state.unpriced_calls) == (0.003, 0)
    assert state.last_call_cost_usd == 0.003  # what the look-ahead expects of the next call
    resumed = ScriptedModel([echo(1, used(1000, 100)), done(used(1000, 100))], price=PRICE)
    steps = await collect(
        run_react(task="t", model=resumed, tools=[echo_tool()], state=state),
    )
    assert ending(steps).usage.cost_usd == 0.006


async def test_a_checkpoint_from_before_costs_makes_the_run_cost_unknown() -> None:
    model = ScriptedModel([echo(1, used(1000, 100))], price=PRICE)
    first = await collect(
        run_react(
            task="t",
            model=model,
            tools=[echo_tool()],
            limits=Limits(max_steps=1, final_answer_on_limit=False),
        )
    )
    old = dict(of_type(first, Checkpoint)[-1].state)
    del old["cost_usd"], old["unpriced_calls"]
    state = RunState.from_checkpoint(old)
    steps = await collect(
        run_react(
            task="t",
            model=ScriptedModel([echo(1, used(1000, 100)), done(used(1000, 100))], price=PRICE),
            tools=[echo_tool()],
            state=state,
        )
    )
    # its first call's cost was never recorded: the sum of the rest would understate it
    assert of_type(steps, LLMCalled)[-1].cost_usd == 0.003
    assert ending(steps).usage.cost_usd is None


async def test_a_run_whose_price_is_gone_on_resume_still_counts_the_priced_spend() -> None:
    """Mixed: calls priced before a restart, unpriced after (the price was removed). The
    total is null, and the budget still ends the run once the priced part reaches it."""
    model = ScriptedModel([echo(1, used(1000, 100))], price=PRICE)
    first = await collect(
        run_react(
            task="t",
            model=model,
            tools=[echo_tool()],
            limits=Limits(max_steps=1, final_answer_on_limit=False),
        )
    )
    state = RunState.from_checkpoint(of_type(first, Checkpoint)[-1].state)
    unpriced = FunctionModel(lambda m, t: echo(2, used(10, 1)), price=None)
    limits = Limits(max_cost_usd=0.003, final_answer_on_limit=False)
    steps = await collect(
        run_react(task="t", model=unpriced, tools=[echo_tool()], state=state, limits=limits)
    )
    end = ending(steps)
    assert end.reason == StopReason.COST_BUDGET
    assert end.usage.cost_usd is None


async def test_the_capped_model_the_service_runs_keeps_its_models_price() -> None:
    model = CappedModel(ScriptedModel([done(used(1000, 100))], price=PRICE), 1000, BUILTIN["en"])
    assert model.price is PRICE
    steps = await collect(run_react(task="t", model=model))
    assert ending(steps).usage.cost_usd == 0.003


def test_the_look_ahead_prices_a_prompt_at_its_tiers_input_rate() -> None:
    tiered = Price(Rates(2.0, 10.0, 0.5), tiers=((200_000, Rates(4.0, 15.0, 1.0)),))
    assert tiered.prompt_cost(200_000) == pytest.approx(0.4)
    assert tiered.prompt_cost(200_001) == pytest.approx(0.800004)
    assert PRICE.prompt_cost(1000) == 0.002


async def test_planning_calls_are_priced_and_count_in_the_runs_cost() -> None:
    planned = Reply(tool_calls=(call("update_plan", {"plan": [{"step": "answer"}]}),))
    replies = [
        Reply(tool_calls=planned.tool_calls, usage=used(1000, 100)),  # the planning call
        done(used(1000, 100)),
    ]
    model = ScriptedModel(replies, price=PRICE)
    limits = Limits(planning_interval=3)
    steps = await collect(run_react(task="t", model=model, tools=[UpdatePlanTool()], limits=limits))
    assert [c.cost_usd for c in of_type(steps, LLMCalled)] == [0.003, 0.003]
    assert ending(steps).usage.cost_usd == 0.006


DOLLAR_A_CALL = Price(Rates(input=1.0, output=10.0, cached_input=1.0))
"""With `used(500_000, 50_000)`: $0.50 of prompt and $0.50 of completion, one dollar a call."""


def dollar(reply: Reply) -> Reply:
    return Reply(reply.content, reply.tool_calls, usage=used(500_000, 50_000))


async def test_a_step_whose_call_would_pass_the_budget_gives_way_to_the_final_call() -> None:
    """The look-ahead expects the next call to cost no less than the last one did ($1): with
    $2 spent of $2.50, the third step's call would pass the budget, so the final call comes
    instead and is the one call past it."""
    replies = [echo(1, used(0, 0)), echo(2, used(0, 0)), says("best so far"), echo(3, used(0, 0))]
    model = ScriptedModel([dollar(r) for r in replies], price=DOLLAR_A_CALL)
    limits = Limits(max_cost_usd=2.5)
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()], limits=limits))
    end = ending(steps)
    assert (end.reason, end.answer) == (StopReason.COST_BUDGET, "best so far")
    assert [c.cost_usd for c in of_type(steps, LLMCalled)] == [1.0, 1.0, 1.0]
    assert end.usage.cost_usd == 3.0
    assert end.usage.steps == 2


async def test_once_a_call_passed_the_budget_no_final_call_follows() -> None:
    first = dollar(echo(1, used(0, 0)))
    second = Reply(tool_calls=echo(2, used(0, 0)).tool_calls, usage=used(1_000_000, 100_000))
    model = ScriptedModel([first, second, says("never asked")], price=DOLLAR_A_CALL)
    limits = Limits(max_cost_usd=2.5)
    steps = await collect(run_react(task="t", model=model, tools=[echo_tool()], limits=limits))
    end = ending(steps)
    assert (end.reason, end.answer, end.degraded) == (StopReason.COST_BUDGET, None, False)
    assert [c.cost_usd for c in of_type(steps, LLMCalled)] == [1.0, 2.0]
    assert len(model.calls) == 2
    assert of_type(steps, Intervention) == []  # no limit prompt: no final call


async def test_a_planning_step_expects_two_calls_its_planning_call_and_its_own() -> None:
    """Planning before steps 1 and 3, $1 a call, $4.50: $3 spent after step 2; step 3 would
    make two calls ($5), so the final call comes instead ($4); one call would have fit."""
    plan = Reply(
        tool_calls=(call("update_plan", {"plan": [{"step": "echo", "status": "pending"}]}),)
    )
    replies = [plan, echo(1, used(0, 0)), echo(2, used(0, 0)), says("best so far"), plan]
    model = ScriptedModel([dollar(r) for r in replies], price=DOLLAR_A_CALL)
    limits = Limits(max_cost_usd=4.5, planning_interval=2)
    tools = [echo_tool(), UpdatePlanTool()]
    steps = await collect(run_react(task="t", model=model, tools=tools, limits=limits))
    end = ending(steps)
    assert (end.reason, end.answer) == (StopReason.COST_BUDGET, "best so far")
    assert end.usage.cost_usd == 4.0
    assert end.usage.steps == 2
