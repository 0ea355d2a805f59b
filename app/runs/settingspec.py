"""A run's settings as a request gives them (`settings` of POST /runs): one optional field
per setting declared on `Limits`, with the same bounds; an omitted one takes the server's
default, and the server's caps are checked by `app.assembly`."""

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
