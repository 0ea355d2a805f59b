"""A run's settings as a request gives them (`settings` of POST /runs): one optional field
per setting declared on `Limits`, with the same bounds; an omitted one takes the server's
default, and the server's caps are checked by `app.assembly`. Beside them, the run's
`outcome` (DESIGN §22): the rubric its answer is graded against, how many revisions the model
gets (`max_revisions`, the setting's value for the run), and the grader; `app.outcomes` checks
what depends on the server (the rubric's length, the cap, the grader's model)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, get_args

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from app.engine.declarations import Declared, declared
from app.engine.policies import Limits
from app.runs.jsonsafe import json_integer

INTEGER_SETTINGS = tuple(
    name for name, item in declared(Limits).items() if int in (item.type, *get_args(item.type))
)
"""The settings whose values are integers: `2.0` is taken as 2 there (and only there: a
number setting keeps `1e19` as the float it is)."""


class _RunSettingsBase(BaseModel):
    """Per-run settings; each omitted one takes the server's default. Caps: GET /settings."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"max_steps": 8, "max_time_s": 30, "progress": True}]},
    )

    @field_validator(*INTEGER_SETTINGS, mode="before", check_fields=False)
    @classmethod
    def _json_integers(cls, value: Any) -> Any:
        return json_integer(value)


def _request_field(item: Declared) -> tuple[Any, Any]:
    """A setting as a request field: optional (omitted: the server's default), same bounds."""
    spec = item.spec
    info = Field(None, ge=spec.ge, gt=spec.gt, description=item.description)
    return item.type | None, info


if TYPE_CHECKING:
    RunSettingsIn = _RunSettingsBase
else:
    RunSettingsIn = create_model(
        "RunSettingsIn",
        __base__=_RunSettingsBase,
        __doc__=_RunSettingsBase.__doc__,
        __module__=__name__,
        **{name: _request_field(item) for name, item in declared(Limits).items()},
    )
"""One optional field per setting of `Limits`, with its bounds; nothing else."""


class GraderIn(BaseModel):
    """The grader: one LLM call in a context of its own (the task, the rubric, the answer)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = Field(
        None,
        min_length=1,
        description="The grader's model; default: the run's. A model with no known price "
        "cannot grade a run with a cost budget.",
    )
    system_prompt: str | None = Field(
        None,
        min_length=1,
        description="The grader's system prompt; default: the built-in one (a strict grader "
        "that answers with a verdict tool).",
    )


class OutcomeIn(BaseModel):
    """The answer is accepted only when the grader judges that it meets `rubric`."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "rubric": "Names three risks, each with a mitigation; under 200 words.",
                    "max_revisions": 1,
                }
            ]
        },
    )

    rubric: str = Field(
        min_length=1,
        description="What a good answer does, for the grader (length capped by "
        "FINISHLINE_MAX_RUBRIC_CHARS).",
    )
    max_revisions: int | None = Field(
        None,
        ge=0,
        description="Answers after the first the grader may judge unmet; the next unmet one "
        "ends the run incomplete with outcome_unmet. Default: settings.max_revisions "
        "(FINISHLINE_MAX_REVISIONS); at most FINISHLINE_MAX_REVISIONS_LIMIT.",
    )
    grader: GraderIn = Field(default_factory=GraderIn, description="The grader's model and prompt.")

    @field_validator("max_revisions", mode="before")
    @classmethod
    def _json_integer(cls, value: Any) -> Any:
        return json_integer(value)
