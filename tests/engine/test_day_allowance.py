"""A run of an API key whose day quotas are spent ends as at its own budget (DESIGN §13): the
engine reads what the key may still spend today through its `allowance` handle (the runs
layer's port onto the store's day counters) at the top of each step, and ends with
`token_budget` or `cost_budget`, its final call allowed, as for `max_total_tokens` and
`max_cost_usd`. The engine holds no counter of its own: what another run of the key spent
shows in the allowance."""

from __future__ import annotations

from app.engine.loop import run_react
from app.engine.policies import InterventionKind, Limits, StopReason
from app.engine.ports import Allowance, Price, Rates, Reply, TokenUsage
from app.engine.steps import Intervention, LLMCalled
from app.llm.scripted import ScriptedModel
from tests.engine.kit import call, echo_tool, ending, finish, of_type


def echo(i: int, tokens: int = 100) -> Reply:
    return Reply(tool_calls=(call("echo", {"text": str(i)}),), usage=TokenUsage(tokens, 0))


class DayLedger:
    """What the runs layer would answer: a day's token quota less what the key spent, here
    counted from the calls this run made plus what other runs spent (`elsewhere`)."""

    def __init__(self, tokens_per_day: int | None, cost_per_day: float | None = None) -> None:
        self.tokens_per_day = tokens_per_day
        self.cost_per_day = cost_per_day
        self.elsewhere = 0
        self.spent = 0
        self.cost = 0.0
        self.reads = 0

    def __call__(self) -> Allowance:
        self.reads += 1
        tokens = None
        if self.tokens_per_day is not None:
            tokens = self.tokens_per_day - self.spent - self.elsewhere
        cost = None if self.cost_per_day is None else self.cost_per_day - self.cost
        return Allowance(tokens=tokens, cost_usd=cost)


async def run_counting(model: ScriptedModel, ledger: DayLedger, **limits: object) -> list:
    steps = []
    async for step in run_react(
        task="t", model=model, tools=[echo_tool()], limits=Limits(**limits), allowance=ledger
    ):
        if isinstance(step, LLMCalled):
            ledger.spent += step.prompt_tokens + step.completion_tokens
            ledger.cost += step.cost_usd or 0.0
        steps.append(step)
    return steps


async def test_a_run_ends_with_token_budget_once_its_key_spent_the_days_tokens() -> None:
    ledger = DayLedger(tokens_per_day=250)
    model = ScriptedModel([echo(1), echo(2), echo(3), Reply(content="best guess")])
    steps = await run_counting(model, ledger)

    end = ending(steps)
    assert end.reason == StopReason.TOKEN_BUDGET
    assert (end.answer, end.degraded) == ("best guess", True)  # the final call is allowed
    assert len(of_type(steps, LLMCalled)) == 4  # 100, 200, 300 >= 250: then the final call
    kinds = [s.kind for s in of_type(steps, Intervention)]
    assert kinds == [InterventionKind.TOKEN_BUDGET]


async def test_what_other_runs_of_the_key_spent_ends_a_run_at_the_top_of_its_next_step() -> None:
    ledger = DayLedger(tokens_per_day=1000)
    ledger.elsewhere = 1000  # another run spent the day meanwhile
    model = ScriptedModel([Reply(content="nothing more")])
    steps = await run_counting(model, ledger, final_answer_on_limit=True)

    end = ending(steps)
    assert end.reason == StopReason.TOKEN_BUDGET
    assert [c.final for c in of_type(steps, LLMCalled)] == [True]  # no step: the final call


async def test_a_spent_day_cost_ends_the_run_with_cost_budget() -> None:
    ledger = DayLedger(tokens_per_day=None, cost_per_day=0.0)
    model = ScriptedModel([echo(1)])
    steps = await run_counting(model, ledger, final_answer_on_limit=False)

    end = ending(steps)
    assert end.reason == StopReason.COST_BUDGET
    assert of_type(steps, LLMCalled) == []


async def test_a_key_with_allowance_left_runs_to_its_end_and_is_asked_at_each_step() -> None:
    ledger = DayLedger(tokens_per_day=10_000, cost_per_day=5.0)
    model = ScriptedModel([echo(1), echo(2), Reply(tool_calls=finish("42").tool_calls)])
    steps = await run_counting(model, ledger)

    assert ending(steps).reason == StopReason.FINISHED
    assert ledger.reads == 3  # the top of each step


async def test_the_runs_own_budget_is_named_before_the_days() -> None:
    ledger = DayLedger(tokens_per_day=None, cost_per_day=0.0001)
    price = Price(Rates(input=2.0, output=10.0, cached_input=0.5))
    model = ScriptedModel([echo(1, tokens=100)], price=price)  # $0.0002: the day is spent too
    steps = await run_counting(model, ledger, max_total_tokens=100, final_answer_on_limit=False)
    assert ending(steps).reason == StopReason.TOKEN_BUDGET  # the run's own, not cost_budget
