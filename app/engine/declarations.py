"""How a per-run setting is declared: once, on `app.engine.policies.Limits`.

Each field of `Limits` is `name: type = setting(default, "description", bounds, cap)`. From
that one declaration come the request's `settings` model (`app.runs.spec.RunSettingsIn`), the
server's default and `*_LIMIT` cap variables (`app.settings.Settings`), `GET /settings`, the
OpenAPI text and `.env.example` (which a test keeps in step). See docs/settings.md.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

NO_CAP: Any = object()
"""`cap=` of a setting the server does not cap (booleans, choices)."""


@dataclass(frozen=True, slots=True)
class Setting:
    """What a per-run setting is besides its name, type and default."""

    description: str
    """One line for people: the OpenAPI schema, GET /settings and .env.example."""
    ge: float | None = None
    """Smallest accepted value (inclusive), if any."""
    gt: float | None = None
    """Accepted values are above this, if set."""
    capped: bool = False
    """Whether the server caps what a request may ask (`FINISHLINE_<NAME>_LIMIT`)."""
    cap: Any = None
    """The cap's default; None: uncapped unless the deployment sets one."""
    zero_is_unbounded: bool = False
    """0 turns the bound off, so a request for 0 exceeds any cap (max_tool_result_chars)."""
    null_is_off: bool = False
    """null turns the feature off (planning_interval), so the cap bounds non-null values only;
    otherwise null is unbounded (max_total_tokens) and exceeds any cap."""

    def cap_name(self, name: str) -> str:
        """The server setting that caps `name`: max_steps_limit, max_time_limit_s …"""
        return f"{name[:-2]}_limit_s" if name.endswith("_s") else f"{name}_limit"


def setting(
    default: Any,
    description: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
    cap: Any = NO_CAP,
    zero_is_unbounded: bool = False,
    null_is_off: bool = False,
) -> Any:
    """A `Limits` field: its default, and its `Setting` as the field's metadata."""
    spec = Setting(
        description=description,
        ge=ge,
        gt=gt,
        capped=cap is not NO_CAP,
        cap=None if cap is NO_CAP else cap,
        zero_is_unbounded=zero_is_unbounded,
        null_is_off=null_is_off,
    )
    return dataclasses.field(default=default, metadata={"setting": spec})


@dataclass(frozen=True, slots=True)
class Declared:
    """One per-run setting as declared: name, type, default and the rest."""

    name: str
    type: Any
    default: Any
    spec: Setting

    @property
    def nullable(self) -> bool:
        """Whether null is a value of the setting (max_total_tokens: null = no budget)."""
        return type(None) in typing.get_args(self.type)

    @property
    def description(self) -> str:
        """The description with the default: "LLM turns before … (default 10)." """
        return f"{self.spec.description.removesuffix('.')} (default {shown(self.default)})."


def shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def declared(cls: type) -> Mapping[str, Declared]:
    """Every setting `cls` (a dataclass of `setting()` fields) declares, in order."""
    hints = typing.get_type_hints(cls)
    return {
        f.name: Declared(f.name, hints[f.name], f.default, f.metadata["setting"])
        for f in dataclasses.fields(cls)
    }
