"""Outcomes (DESIGN §22): a run's answer graded against a rubric by one LLM call in a context
of its own: the task, the rubric and the answer (the JSON text of a typed one), never the
run's conversation.

The grader is asked for a typed verdict `{satisfied, feedback}` the way typed answers are:
with a tool (`submit_verdict`, whose parameters are the verdict's schema) that the call
forces where the model can be forced; a reply without that call is read as JSON text (the
checked fallback for a model that cannot be forced). A reply that is neither a valid call nor
a valid JSON verdict is retried like a failed call (`llm_retries`, an `llm.retry` event each),
then counts as an unmet verdict (`Verdict.valid` False). A grader call that fails, times out
or meets the run's deadline raises as any call of the run does (`app.engine.asking.ask`): the
loop ends the run as at any limit.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from app.engine.asking import Aside, ask
from app.engine.context import RunContext
from app.engine.ports import ChatModel, Message, Reply, ToolSpec
from app.engine.prompts import SUBMIT_VERDICT, Prompts
from app.engine.steps import LLMRetry, Step

VERDICT_PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "satisfied": {
            "type": "boolean",
            "description": "true only when the answer meets every point of the rubric",
        },
        "feedback": {
            "type": "string",
            "description": "what is missing or wrong, precisely enough to fix it",
        },
    },
    "required": ["satisfied", "feedback"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class Outcome:
    """A run's outcome: its `rubric`, and its grader: `model` (None: the run's own model) with
    `system_prompt` (None: the built-in one). `max_revisions` is on the run's `Limits`."""

    rubric: str
    model: ChatModel | None = None
    system_prompt: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The grader's judgement of one answer. `valid` False: the grader gave none that was
    valid after its retries, so it counts as unmet, `feedback` saying so."""

    satisfied: bool
    feedback: str
    valid: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"satisfied": self.satisfied, "feedback": self.feedback, "valid": self.valid}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        return cls(bool(data["satisfied"]), str(data["feedback"]), bool(data.get("valid", True)))


def verdict_spec(prompts: Prompts) -> ToolSpec:
    return ToolSpec(SUBMIT_VERDICT, prompts.verdict_description, VERDICT_PARAMETERS)


def verdict_value(value: Any) -> Verdict | str:
    """`value` (parsed JSON) as a verdict, or what is wrong with it."""
    if not isinstance(value, dict):
        return "the verdict is not a JSON object"
    extra = sorted(set(value) - {"satisfied", "feedback"})
    if extra:
        return f"unexpected properties: {', '.join(extra)}"
    satisfied, feedback = value.get("satisfied"), value.get("feedback")
    if not isinstance(satisfied, bool):
        return "'satisfied' is required and must be a boolean"
    if not isinstance(feedback, str):
        return "'feedback' is required and must be a string"
    return Verdict(satisfied, feedback)


def verdict_of(reply: Reply) -> Verdict | str:
    """The verdict `reply` gives: its `submit_verdict` call's arguments, else (no call: a model
    that cannot be forced) its text as a JSON verdict, possibly fenced; or why it gives none."""
    calls = [call for call in reply.tool_calls if call.name == SUBMIT_VERDICT]
    text = calls[0].arguments if calls else (reply.content or "").strip()
    if not calls and text.startswith("```") and text.endswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        value = json.loads(text)
    except ValueError:
        return "no submit_verdict call, and the reply is not a JSON verdict"
    return verdict_value(value)


def grader_messages(outcome: Outcome, prompts: Prompts, task: str, answer: str) -> list[Message]:
    """The grader's whole context: its system prompt, then the task, rubric and answer."""
    request = prompts.grader_request.format(task=task, rubric=outcome.rubric, answer=answer)
    return [
        {"role": "system", "content": outcome.system_prompt or prompts.grader_system_prompt},
        {"role": "user", "content": request},
    ]


async def grade(
    run: RunContext, outcome: Outcome, task: str, answer: str, deadline: float
) -> AsyncIterator[Step | Verdict]:
    """Grade `answer`: the grader call's steps (`llm.call`, retries), then the `Verdict`.
    Raises as `ask` does (deadline, cancel, a grader that keeps failing)."""
    model = outcome.model or run.model
    aside = Aside(model, grader_messages(outcome, run.prompts, task, answer))
    specs = (verdict_spec(run.prompts),)
    attempt = 0
    while True:
        reply: Reply | None = None
        async for item in ask(run, specs, deadline, force_tool=SUBMIT_VERDICT, aside=aside):
            if isinstance(item, Reply):
                reply = item
            else:
                yield item
        assert reply is not None
        found = verdict_of(reply)
        if isinstance(found, Verdict):
            run.log.info("answer_graded", satisfied=found.satisfied, grader=model.name)
            yield found
            return
        if attempt >= run.limits.llm_retries:
            run.log.warning("verdict_invalid", problem=found, attempts=attempt + 1)
            yield Verdict(False, f"The grader gave no valid verdict: {found}.", valid=False)
            return
        attempt += 1
        run.log.warning("llm_retried", attempt=attempt, error=f"invalid verdict: {found}")
        yield LLMRetry(run.state.step, attempt, f"invalid verdict: {found}", 0.0)
