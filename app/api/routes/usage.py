"""GET /usage: what the caller's API key used today, and its quotas (DESIGN §13)."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import CallerDep, ManagerDep
from app.api.errors import ErrorBody
from app.api.schemas import QuotaUse, UsageView
from app.runs.metrics import key_label

router = APIRouter(tags=["usage"])


@router.get(
    "/usage",
    response_model=UsageView,
    summary="Your key's usage today and its quotas",
    description="The caller's own figures for the current UTC day (runs, LLM calls, tokens, "
    "USD) and each quota the server sets, with what is used and left. Another key's figures "
    "are never shown. See docs/guides/budgets.md, 'Quotas'.",
    responses={401: {"model": ErrorBody}},
)
async def usage(manager: ManagerDep, caller: CallerDep) -> UsageView:
    figures = await manager.usage(caller.owner)
    used = figures.used
    return UsageView(
        day=figures.day,
        key_id=key_label(caller.owner),
        runs=used.runs,
        llm_calls=used.llm_calls,
        prompt_tokens=used.prompt_tokens,
        completion_tokens=used.completion_tokens,
        total_tokens=used.total_tokens,
        cost_usd=round(used.cost_usd, 12),
        unpriced_calls=used.unpriced_calls,
        quotas={
            name.value: QuotaUse(limit=limit, used=held, left=max(0, limit - held))
            for name, (limit, held) in figures.quotas().items()
        },
    )
