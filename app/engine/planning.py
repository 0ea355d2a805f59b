"""Plan-then-execute (DESIGN §15): the planning calls before steps 1, N+1, 2N+1 …

With `Limits.planning_interval` N, a step due for planning (`policies.planning_due`) makes a
planning call after its limit checks and injected messages and before its own LLM call: the
planning prompt joins the conversation as a user message (intervention `planning`; once the
run has a plan, the prompt shows it), then one LLM call with the run's tools that must call
`update_plan`: `force_tool` forces it where the model can be forced (OpenAI's `tool_choice`),
and the prompt asks for it everywhere.

The reply is handled like any other: its calls run (`update_plan` records the plan; the same
plan again is what was asked for, never a repetition), and a reply that ends the run
(task_finished alone; a plain answer with stop_tool off) ends it. A reply that recorded no
plan gets the planning nudge and one more planning call; when that records none either,
planning is skipped until the next planning step: never more than two planning calls a step,
never a loop (and no nudge when the cost budget has no room for its call and the step's own).
Then the step's own call. Planning calls count in `usage.llm_calls` and the tokens, never as
steps (`max_steps` counts the steps' own calls).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from app.engine.asking import call_over_budget
from app.engine.context import RunContext
from app.engine.policies import InterventionKind
from app.engine.ports import Plan
from app.engine.prompts import UPDATE_PLAN, Prompts
from app.engine.steps import ApprovalRequested, Finished, Observation, Step


class Turn(Protocol):
    """One LLM call and what its reply does (the loop's turn); `force_tool`: the tool the
    reply must call, where the model can be forced."""

    def __call__(self, *, force_tool: str | None = None) -> AsyncIterator[Step]: ...


def planning_text(plan: Plan, prompts: Prompts) -> str:
    """The planning prompt: the first one, or, once there is a plan, the review of it."""
    if not plan.items:
        return prompts.planning_prompt
    lines = "\n".join(
        prompts.plan_line.format(number=number, status=item.status, step=item.step)
        for number, item in enumerate(plan.items, 1)
    )
    return prompts.replanning_prompt.format(
        completed=plan.completed, total=len(plan.items), plan=lines
    )


def recorded_plan(step: Step) -> bool:
    """Whether `step` is the observation of an `update_plan` call that recorded a plan."""
    return (
        isinstance(step, Observation)
        and step.tool == UPDATE_PLAN
        and not step.is_error
        and not step.repeated
    )


async def planning_turns(run: RunContext, turn: Turn) -> AsyncIterator[Step]:
    """The planning call of this step, and after a reply without a plan the nudge and one
    more; none after a reply that ended the run or made it wait for a person."""
    prompts = (planning_text(run.state.plan, run.prompts), run.prompts.planning_nudge)
    for nudge, prompt in enumerate(prompts):
        if nudge and call_over_budget(run, 2) is not None:
            break  # no room for the nudge's call and the step's own: the step's own alone
        yield run.inject(InterventionKind.PLANNING, prompt)
        planned = stopped = False
        async for item in turn(force_tool=UPDATE_PLAN):
            yield item
            planned = planned or recorded_plan(item)
            stopped = stopped or isinstance(item, Finished | ApprovalRequested)
        if planned or stopped:
            return
    run.log.info("planning_skipped")
