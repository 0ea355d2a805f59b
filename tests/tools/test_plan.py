"""update_plan: replaces the run's plan, at most one step in progress, a one-line summary."""

from __future__ import annotations

import pytest

from app.engine.ports import Plan, PlanItem, ToolContext
from app.engine.prompts import UPDATE_PLAN
from app.tools.base import ToolError
from app.tools.plan import UpdatePlanTool


async def test_update_plan_replaces_the_plan_in_the_run_context(ctx: ToolContext) -> None:
    ctx.plan.items = [PlanItem("old step", "completed")]
    arguments = {
        "plan": [
            {"step": "search", "status": "completed"},
            {"step": "read", "status": "in_progress"},
            {"step": "write", "status": "pending"},
        ]
    }
    tool = UpdatePlanTool()
    assert tool.validate(arguments) is None

    result = await tool.call(arguments, ctx)

    assert ctx.plan == Plan(
        [PlanItem("search", "completed"), PlanItem("read", "in_progress"), PlanItem("write")]
    )
    assert result == "Plan updated: 1/3 completed. Next: read"


async def test_update_plan_says_when_every_step_is_completed(ctx: ToolContext) -> None:
    result = await UpdatePlanTool().call({"plan": [{"step": "a", "status": "completed"}]}, ctx)
    assert result == "Plan updated: 1/1 completed. Every step is completed."


async def test_update_plan_with_no_steps_clears_the_plan(ctx: ToolContext) -> None:
    ctx.plan.items = [PlanItem("a")]
    assert await UpdatePlanTool().call({"plan": []}, ctx) == "Plan cleared: it has no steps."
    assert ctx.plan.items == []


def test_update_plan_refuses_two_steps_in_progress() -> None:
    arguments = {
        "plan": [{"step": "a", "status": "in_progress"}, {"step": "b", "status": "in_progress"}]
    }
    message = UpdatePlanTool().validate(arguments)
    assert message == "at 'plan': at most one step may be 'in_progress', found 2: 'a', 'b'"


async def test_update_plan_call_refuses_two_steps_in_progress_too(ctx: ToolContext) -> None:
    arguments = {
        "plan": [{"step": "a", "status": "in_progress"}, {"step": "b", "status": "in_progress"}]
    }
    with pytest.raises(ToolError, match="at most one step"):
        await UpdatePlanTool().call(arguments, ctx)
    assert ctx.plan.items == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "'plan' is a required property"),
        ({"plan": "do it"}, "at 'plan': 'do it' is not of type 'array'"),
        ({"plan": [{"step": "a"}]}, "at 'plan[0]': 'status' is a required property"),
        (
            {"plan": [{"step": "a", "status": "done"}]},
            "at 'plan[0].status': 'done' is not one of ['pending', 'in_progress', 'completed']",
        ),
        (
            {"plan": [{"step": "", "status": "pending"}]},
            "at 'plan[0].step': '' should be non-empty",
        ),
    ],
)
def test_update_plan_validates_its_arguments(arguments: dict[str, object], message: str) -> None:
    assert UpdatePlanTool().validate(arguments) == message


def test_update_plan_is_the_prompts_name_and_not_idempotent() -> None:
    tool = UpdatePlanTool()
    assert tool.name == UPDATE_PLAN
    assert tool.idempotent is False
