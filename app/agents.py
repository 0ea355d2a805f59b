"""Agent profiles (DESIGN §14): the agents a deployment offers, by name.

`FINISHLINE_AGENTS` is JSON, or `@path` naming a JSON file: an object from profile name to
`{"description", "system_prompt"?, "model"?, "tools"?, "mcp_servers"?, "http_tools"?,
"settings"?, "approval"?, "output_schema"?, "outcome"?, "agents"?}` (`planning_interval` and
every other per-run setting go in `settings`). Each field is validated as the same field of
`POST /runs` (by the request's own model, `RunRequest`): an unknown field, a bad value or a bad
name stops start-up with one line per problem, each naming the profile and the field. What
depends on the server (caps, tool names, allowed hosts, the model) is checked at start-up next, by
`app.assembly.RunAssembly.check_profiles`. The file is read once, when the settings are made:
a request that names a profile reads nothing.

A field DESIGN lists that this server's requests do not take yet would be refused at start-up
as not supported yet: a profile is never half applied. Every field of DESIGN §14 is taken
now: a profile's `output_schema` is its runs' default, which a request's own replaces (an
invalid one stops start-up), and its `agents` are its runs' sub-agents (DESIGN §15).

`apply_profile` makes a request's run: the profile's values are its defaults; a field the
request gives replaces the profile's (lists such as `tools` whole), except `settings`, which
merge key by key (the request's values win).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from app.engine.paths import field_path
from app.jsonsource import json_setting
from app.runs.spec import RunRequest, RunSettingsIn

VARIABLE = "FINISHLINE_AGENTS"
PROFILE_FIELDS = (
    "system_prompt",
    "model",
    "tools",
    "mcp_servers",
    "http_tools",
    "settings",
    "approval",
    "output_schema",
    "outcome",
    "agents",
)
"""What a profile may set besides its description: the fields of DESIGN §14, named as in
`POST /runs`."""
PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
"""1 to 64 letters, digits, '-' or '_', starting with a letter or digit: a name that fits in
a URL path (`/agents/NAME`, `/a2a/NAME`) as it is."""
MAX_DESCRIPTION_CHARS = 2000
_TASK = "(the profile's defaults)"
"""The task of the request a profile's fields are validated as; never run."""


class AgentProfile(BaseModel):
    """One profile: its name, description, and the request fields it sets (`defaults`, a
    request whose task is a placeholder; `fields` names those the profile gives)."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    defaults: RunRequest

    @property
    def fields(self) -> list[str]:
        """The request fields the profile sets, in `PROFILE_FIELDS` order."""
        given = self.defaults.model_fields_set
        return [name for name in PROFILE_FIELDS if name in given]


def apply_profile(request: RunRequest, profile: AgentProfile) -> RunRequest:
    """`request` with `profile`'s values as its defaults (see the module docstring)."""
    given = request.model_fields_set
    values = {name: getattr(request, name) for name in RunRequest.model_fields}
    fields = set(given)
    defaults = profile.defaults
    for name in profile.fields:
        if name == "settings":
            merged = {
                **defaults.settings.model_dump(exclude_unset=True),
                **request.settings.model_dump(exclude_unset=True),
            }
            values[name] = RunSettingsIn.model_construct(set(merged), **merged)
        elif name not in given:
            value = getattr(defaults, name)
            values[name] = list(value) if isinstance(value, list) else value
        fields.add(name)
    return RunRequest.model_construct(fields, **values)


def parse_agents(value: Any) -> dict[str, AgentProfile]:
    """The profiles of `value` (JSON text, `@path`, or a mapping decoded already; profiles
    made already pass as they are). `ValueError` holds one line per problem, each naming the
    profile and the field."""
    value, source = json_setting(value, VARIABLE)
    if not isinstance(value, dict):
        raise ValueError(f"{source}: must be a JSON object of profile name -> profile")
    problems: list[str] = []
    profiles: dict[str, AgentProfile] = {}
    for name, spec in value.items():
        if isinstance(spec, AgentProfile):
            profiles[name] = spec
            continue
        if not isinstance(name, str) or not PROFILE_NAME.fullmatch(name):
            problems.append(
                f"profile name {name!r}: use 1 to 64 letters, digits, '-' or '_', starting "
                "with a letter or digit"
            )
            continue
        found, profile = _profile(name, spec)
        problems += [f"profile {name!r}: {problem}" for problem in found]
        if profile is not None:
            profiles[name] = profile
    if problems:
        raise ValueError(f"{source}: " + "; ".join(problems))
    return profiles


def _profile(name: str, spec: Any) -> tuple[list[str], AgentProfile | None]:
    if not isinstance(spec, dict):
        return ["must be an object with a description"], None
    problems: list[str] = []
    description = spec.get("description")
    if not isinstance(description, str) or not description.strip():
        problems.append("description: required, a non-empty string")
    elif len(description) > MAX_DESCRIPTION_CHARS:
        problems.append(f"description: at most {MAX_DESCRIPTION_CHARS} characters")
    fields: dict[str, Any] = {}
    for key, item in spec.items():
        if key == "description":
            continue
        if key not in PROFILE_FIELDS:
            problems.append(
                f"unknown field {key!r}; a profile takes description, {', '.join(PROFILE_FIELDS)}"
            )
        elif key not in RunRequest.model_fields:
            problems.append(f"{key}: not supported yet: runs on this server do not take it")
        else:
            fields[key] = item
    try:
        defaults = RunRequest.model_validate({"task": _TASK, **fields})
    except ValidationError as exc:
        found = exc.errors(include_url=False)
        problems += [f"{field_path(e['loc']) or 'value'}: {e['msg']}" for e in found]
        return problems, None
    if problems:
        return problems, None
    return [], AgentProfile(name=name, description=str(description), defaults=defaults)
