"""A request's `outcome` (DESIGN §22) against this server: checked at creation (the rubric's
length, `max_revisions` within its cap, the grader's model), made the engine's `Outcome` at
start. Beside `app.assembly`, which calls both."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from app.engine.grading import Outcome
from app.engine.policies import Limits
from app.engine.ports import ChatModel
from app.llm.models import SCRIPTED, ModelFactory, ModelUnavailableError
from app.runs.errors import InvalidRunError
from app.runs.spec import RunRequest
from app.settings import Settings


def _over(field: str, size: int, cap: int) -> InvalidRunError:
    return InvalidRunError(field, f"{size:,} chars exceeds the server cap of {cap:,}", cap=cap)


def check_outcome_sizes(request: RunRequest, server: Settings) -> None:
    """The outcome's texts within their caps (with `app.caps.check_sizes`)."""
    outcome = request.outcome
    if outcome is None:
        return
    if len(outcome.rubric) > server.max_rubric_chars:
        raise _over("outcome.rubric", len(outcome.rubric), server.max_rubric_chars)
    prompt = outcome.grader.system_prompt
    if prompt is not None and len(prompt) > server.max_system_prompt_chars:
        raise _over("outcome.grader.system_prompt", len(prompt), server.max_system_prompt_chars)
    model = outcome.grader.model
    if model is not None and len(model) > server.max_model_name_chars:
        raise _over("outcome.grader.model", len(model), server.max_model_name_chars)


def checked_outcome(
    request: RunRequest, limits: Limits, models: ModelFactory, server: Settings
) -> Limits:
    """`limits` with the outcome's `max_revisions` (InvalidRunError naming the field when it
    is over the server's cap, or says otherwise than `settings.max_revisions`), its grader's
    model checked: one this server has, priced when the run has a cost budget."""
    outcome = request.outcome
    if outcome is None:
        return limits
    wanted = outcome.max_revisions
    if wanted is not None:
        given = getattr(request.settings, "max_revisions", None)  # (a field made from Limits)
        if given is not None and given != wanted:
            raise InvalidRunError(
                "outcome.max_revisions",
                f"{wanted} differs from settings.max_revisions ({given}): give one of them",
            )
        cap = server.cap("max_revisions")
        if cap is not None and wanted > cap:
            raise InvalidRunError(
                "outcome.max_revisions",
                f"{wanted} exceeds the server cap of {cap:g}",
                cap=cap,
                value=wanted,
            )
        limits = replace(limits, max_revisions=wanted)
    name = outcome.grader.model
    if name is not None:
        if name == SCRIPTED:
            raise InvalidRunError(
                "outcome.grader.model",
                "the scripted model grades only as the run's own model (omit grader.model)",
            )
        try:
            models.resolve(name, has_script=False)
        except ModelUnavailableError as exc:
            raise InvalidRunError("outcome.grader.model", str(exc)) from exc
        if limits.max_cost_usd is not None and models.price(name) is None:
            raise InvalidRunError(
                "outcome.grader.model",
                f"model {name!r} has no known price, so the run's cost budget cannot count "
                "its calls: the server can price it with FINISHLINE_MODEL_PRICES",
                model=name,
            )
    return limits


def outcome_of(
    request: RunRequest,
    models: ModelFactory,
    run_model: str,
    capped: Callable[[ChatModel], ChatModel],
) -> Outcome | None:
    """The engine's `Outcome` of a run (its grader the run's own model unless it names
    another: a model of its own, created for the run, its replies `capped` as the run's are)."""
    outcome = request.outcome
    if outcome is None:
        return None
    name = outcome.grader.model
    grader: ChatModel | None = None
    if name is not None and name != run_model:
        grader = capped(models.create(name))
    return Outcome(outcome.rubric, grader, outcome.grader.system_prompt)
