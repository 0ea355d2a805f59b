"""The progress message (`Limits.progress`): where the run stands, injected before each LLM
call after the first."""

from __future__ import annotations

from app.engine.policies import Limits
from app.engine.prompts import Prompts
from app.engine.state import RunState


def progress_text(state: RunState, limits: Limits, prompts: Prompts, elapsed_s: float) -> str:
    text = prompts.progress.format(
        step=state.step,
        max_steps=limits.max_steps,
        elapsed=elapsed_s,
        max_time=limits.max_time_s,
        tool_calls=state.tool_calls,
    )
    plan = state.plan
    if plan.items:
        text += prompts.progress_plan.format(
            completed=plan.completed, total=len(plan.items), next_item=plan.next_item or "-"
        )
    return text
