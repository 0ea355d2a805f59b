"""The built-in `update_plan` tool: the agent keeps its own plan in the run's `ToolContext`.

Each call replaces the whole plan (`ctx.plan.items`); the progress message of the engine
reads it back ("completed x/y, next: ..."). At most one step may be in progress. The tool is
not idempotent: sending the same plan twice is a normal thing to do, not a loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from app.engine.ports import Plan, PlanItem, PlanStatus, ToolContext
from app.engine.prompts import UPDATE_PLAN
from app.tools.base import SchemaTool, ToolError

MAX_PLAN_STEPS = 50
MAX_STEP_CHARS = 500

PARAMETERS = {
    "type": "object",
    "properties": {
        "plan": {
            "type": "array",
            "description": "The whole plan, in order; it replaces the previous one.",
            "maxItems": MAX_PLAN_STEPS,
            "items": {
                "type": "object",
                "properties": {
                    "step": {"type": "string", "minLength": 1, "maxLength": MAX_STEP_CHARS},
                    "status": {"enum": ["pending", "in_progress", "completed"]},
                },
                "required": ["step", "status"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["plan"],
    "additionalProperties": False,
}


class UpdatePlanTool(SchemaTool):
    """Replaces the run's plan and answers with a one-line summary of it."""

    def __init__(self) -> None:
        super().__init__(
            name=UPDATE_PLAN,
            description=(
                "Record your plan for the task as a list of steps, each 'pending', "
                "'in_progress' or 'completed' (at most one in progress). Send the whole plan "
                "each time a step starts or ends; it replaces the previous one."
            ),
            parameters=PARAMETERS,
            builtin=True,
            idempotent=False,
        )

    def validate(self, arguments: Mapping[str, Any]) -> str | None:
        return super().validate(arguments) or _in_progress_problem(arguments["plan"])

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        problem = _in_progress_problem(arguments["plan"])
        if problem is not None:
            raise ToolError(problem)
        ctx.plan.items = [
            PlanItem(step=item["step"], status=cast(PlanStatus, item["status"]))
            for item in arguments["plan"]
        ]
        return summarize(ctx.plan)


def summarize(plan: Plan) -> str:
    """`Plan updated: 1/3 completed. Next: write the report.`"""
    total = len(plan.items)
    if total == 0:
        return "Plan cleared: it has no steps."
    done = f"Plan updated: {plan.completed}/{total} completed."
    next_item = plan.next_item
    if next_item is None:
        return f"{done} Every step is completed."
    return f"{done} Next: {next_item}"


def _in_progress_problem(items: Sequence[Mapping[str, Any]]) -> str | None:
    active = [item["step"] for item in items if item["status"] == "in_progress"]
    if len(active) <= 1:
        return None
    shown = ", ".join(repr(step) for step in active)
    return f"at 'plan': at most one step may be 'in_progress', found {len(active)}: {shown}"
