"""What a client may ask of a run: validated shapes, documented for the OpenAPI schema.

Bounds that depend on the server (caps, allow-lists, registered tools) are checked by
`app.assembly`, which names the offending field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    StringConstraints,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from app.runs.jsonsafe import (
    MAX_JSON_DEPTH,
    STRICT,
    json_depth,
    json_integer,
    json_problem,
)
from app.runs.settingspec import RunSettingsIn
from app.runs.toolspec import (
    ApprovalIn,
    ClientToolIn,
    HttpToolIn,
    ScriptedReplyIn,
    ScriptedToolCallIn,
    ScriptedUsageIn,
)

MAX_LIST_ITEMS = {"tools": 256, "http_tools": 256, "client_tools": 256, "model_script": 1000}
"""Fixed ceilings on the lists of a request, checked before anything in them is validated,
so a huge list is refused in microseconds. Server settings (max_tools, max_script_replies)
set the working caps below these."""


AGENT_NAME = r"^[A-Za-z0-9_-]{1,64}$"
"""A sub-agent's name is the name of the tool the parent's model calls: a tool name."""
PROFILE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
MAX_AGENTS = 64
"""Fixed ceiling on a run's sub-agents; each is a tool, so FINISHLINE_MAX_TOOLS bounds them too."""


def _agent_names_only(schema: dict[str, Any]) -> None:
    """In the schema of a field of agents by name: no key but a name (`AGENT_NAME`)."""
    for branch in schema.get("anyOf", [schema]):
        if "patternProperties" in branch:
            branch["additionalProperties"] = False


_TEXT: dict[str, JsonValue] = {"type": "string"}
_CHILD_FIELDS = (
    "system_prompt",
    "model",
    "tools",
    "mcp_servers",
    "http_tools",
    "settings",
    "approval",
    "model_script",
    "output_schema",
    "agents",
    "agent",
)
"""The fields of a sub-agent that its child run's request takes as they are."""


class AgentIn(BaseModel):
    """A sub-agent (DESIGN §15): offered to the run's model as a tool named as its key, with
    one parameter, `task`. Calling it starts a child run, made of these fields as a request
    of its own (`agent` names a profile of this server, as in POST /runs), or calls the
    remote A2A agent at `a2a_url`."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            # what `_one_kind` checks, said in the schema too
            "allOf": [
                {
                    "anyOf": [
                        {"required": ["description"], "properties": {"description": _TEXT}},
                        {"required": ["agent"], "properties": {"agent": _TEXT}},
                    ]
                },
                {
                    "anyOf": [
                        {"not": {"required": ["a2a_url"]}},
                        {"properties": {"a2a_url": {"type": "null"}}},
                        {"propertyNames": {"enum": ["a2a_url", "description"]}},
                    ]
                },
            ],
            "examples": [
                {
                    "description": "Does arithmetic. Give it one expression to compute.",
                    "tools": ["calculator"],
                },
                {"agent": "researcher"},
                {
                    "description": "The billing team's agent.",
                    "a2a_url": "https://agents.example.com/a2a/billing",
                },
            ],
        },
    )

    description: str | None = Field(
        None,
        min_length=1,
        max_length=2000,
        description="What it does, for the model: the tool's description. Required, unless "
        "`agent` names a profile (the profile's description is the default).",
    )
    agent: str | None = Field(
        None,
        pattern=PROFILE_NAME,
        description="An agent profile of this server (GET /agents): the child run's defaults, "
        "as for POST /runs; the fields given here replace the profile's.",
    )
    a2a_url: str | None = Field(
        None,
        max_length=2000,
        description="A remote A2A agent's JSON-RPC URL (host allow-listed like HTTP tools): "
        "the call sends it the task and its answer is the observation. Takes no other field "
        "but `description`.",
    )
    system_prompt: str | None = Field(None, description="The child run's system prompt.")
    model: str | None = Field(
        None, description="The child run's model; default: the parent run's (or the profile's)."
    )
    tools: list[str] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS["tools"],
        description="Registered tools of the child run.",
    )
    mcp_servers: list[str] = Field(
        default_factory=list, max_length=64, description="MCP servers of the child run."
    )
    http_tools: list[HttpToolIn] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS["http_tools"],
        description="HTTP tools of the child run.",
    )
    settings: RunSettingsIn = Field(
        default_factory=RunSettingsIn,
        description="The child run's settings; its time, tokens and cost are also bounded by "
        "what the parent has left.",
    )
    approval: ApprovalIn | None = Field(
        None, description="Tools of the child run whose calls wait for a person."
    )
    model_script: list[ScriptedReplyIn] | None = Field(
        None,
        max_length=MAX_LIST_ITEMS["model_script"],
        description="The child run's scripted replies (model 'scripted').",
    )
    output_schema: dict[str, Any] | None = Field(
        None,
        description="The child run's output schema (typed answers): the observation the "
        "parent's model gets is then the child's validated answer, as JSON.",
    )
    agents: dict[Annotated[str, StringConstraints(pattern=AGENT_NAME)], AgentIn] = Field(
        default_factory=dict,
        max_length=MAX_AGENTS,
        description="The child run's own sub-agents (depth: FINISHLINE_MAX_AGENT_DEPTH).",
        json_schema_extra=_agent_names_only,
    )

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The fields given, as given (stored so: it reads back as the same agent)."""
        data: dict[str, Any] = handler(self)
        return {name: value for name, value in data.items() if name in self.model_fields_set}

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        given = self.model_fields_set - {"description"}
        if self.a2a_url is not None and given != {"a2a_url"}:
            others = ", ".join(sorted(given - {"a2a_url"}))
            raise ValueError(f"a remote agent (a2a_url) takes only a description, not {others}")
        if self.description is None and self.agent is None:
            raise ValueError("description: required (what the agent does, for the model)")
        return self

    def child_request(self, task: str, parent_model: str | None = None) -> RunRequest:
        """The request of the child run a call with `task` starts (not for `a2a_url`). An
        agent that names no model, no profile and no script runs on `parent_model`."""
        given = {name for name in _CHILD_FIELDS if name in self.model_fields_set}
        fields = RunRequest.model_fields
        values = {n: f.get_default(call_default_factory=True) for n, f in fields.items()}
        values |= {name: getattr(self, name) for name in given} | {"task": task}
        if given.isdisjoint({"model", "agent", "model_script"}) and parent_model is not None:
            values["model"] = parent_model
            given.add("model")
        return RunRequest.model_construct({"task", *given}, **values)


DEEP_FIELDS = ("metadata", "http_tools", "client_tools", "model_script", "output_schema", "agents")
"""The free-form JSON fields of a request, held to MAX_JSON_DEPTH."""


class RunRequest(BaseModel):
    """The part of POST /runs that describes the run itself (kept on the run as `request`)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "task": "What is 17 * 23? Then tell me the time in UTC.",
                    "tools": ["calculator", "current_time"],
                },
                {
                    "task": "Say hi",
                    "model": "scripted",
                    "model_script": [
                        {"tool_calls": [{"name": "task_finished", "arguments": {"answer": "hi"}}]}
                    ],
                },
            ]
        },
    )

    task: str = Field(min_length=1, description="What the agent should do.")
    system_prompt: str | None = Field(
        None, description="System prompt; the stop-tool instructions are appended."
    )
    model: str | None = Field(
        None,
        description="Model name sent to the LLM endpoint; 'demo' (built-in demo agent) or 'scripted' (replays model_script). Default: the server's.",
    )
    tools: list[str] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS["tools"],
        description="Names of tools from GET /tools (built-in, or an MCP server's NAME__TOOL).",
    )
    mcp_servers: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="MCP servers (GET /tools/mcp-servers) whose every tool this run may use.",
    )
    http_tools: list[HttpToolIn] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS["http_tools"],
        description="Tools declared in this request, called over HTTP.",
    )
    client_tools: list[ClientToolIn] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS["client_tools"],
        description="Tools your client runs (AG-UI's frontend tools): the model may call them; "
        "each call makes the run wait (requires_action, in `pending_approvals`) until POST "
        "/runs/{id}/approvals answers it with `result`.",
    )
    settings: RunSettingsIn = Field(default_factory=RunSettingsIn, description="Per-run settings.")
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Your own data, kept on the run."
    )
    model_script: list[ScriptedReplyIn] | None = Field(
        None,
        max_length=MAX_LIST_ITEMS["model_script"],
        description="Replies of the scripted model, one per LLM call.",
    )
    webhook: str | None = Field(
        None,
        max_length=2000,
        description="URL (allow-listed host) that receives the run as JSON once it ends.",
    )
    approval: ApprovalIn | None = Field(
        None, description="Tools whose calls wait for a person's approval."
    )
    output_schema: dict[str, Any] | None = Field(
        None,
        description="A JSON Schema (draft 2020-12) the run's answer must validate against: "
        "with the stop tool, task_finished's `answer` parameter is this schema; without it, "
        "the reply must be JSON that matches it. An answer that fails it is shown its errors "
        "and the run goes on (`settings.max_output_retries` more tries, then the run ends "
        "incomplete with invalid_output). The value is `result.output`, its JSON text "
        "`result.answer`. An invalid schema is a 422; its size is capped like an HTTP tool's "
        "`parameters`. A `$ref` resolves only within the schema (nothing is fetched); "
        "patterns are matched by RE2 (no backreferences or lookaround).",
        json_schema_extra={
            "examples": [
                {
                    "type": "object",
                    "properties": {
                        "verdict": {"enum": ["yes", "no"]},
                        "evidence": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["verdict", "evidence"],
                }
            ]
        },
    )
    webhook_events: list[Literal["ended", "requires_action"]] | None = Field(
        None,
        max_length=2,
        description="When the webhook is called: 'ended' (the default: once, with the ended "
        "run, attempts recorded on it) and/or 'requires_action' (each time the run begins to "
        "wait for a person; attempts are logged, not recorded).",
    )
    agent: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$",
        description="An agent profile of this server (GET /agents): its values are this run's "
        "defaults. Any field this request gives replaces the profile's (lists such as `tools` "
        "whole); `settings` merge key by key, the request's winning; caps hold as always. "
        "An unknown name is a 422.",
    )
    agents: dict[Annotated[str, StringConstraints(pattern=AGENT_NAME)], AgentIn] | None = Field(
        None,
        max_length=MAX_AGENTS,
        json_schema_extra=_agent_names_only,
        description="Sub-agents (router and workers, DESIGN §15): each is a tool NAME(task) for "
        "this run's model; a call starts a child run (parent_run_id: this run), whose answer "
        "is the call's result. The tree shares this run's deadline and budgets.",
    )
    previous_run_id: str | None = Field(
        None,
        pattern=r"^run_[0-9A-Z]{26}$",
        description="Continue that ended run: this run starts from its conversation (its answer "
        "as the last assistant message), then `task`. Its system prompt is inherited unless "
        "this request gives one; tools, model and settings come from this request.",
    )

    _checked: bool = PrivateAttr(False)
    _digest: str | None = PrivateAttr(None)

    def checked(self, digest: str | None) -> Self:
        """Read whole where it came in (`app.api.runbody`): within the caps, its schemas
        compiled (`within_caps`), `digest` its `request_hash` (None: not needed)."""
        self._checked, self._digest = True, digest
        return self

    @property
    def within_caps(self) -> bool:
        return self._checked

    @property
    def digest(self) -> str | None:
        return self._digest

    @model_validator(mode="before")
    @classmethod
    def _representable(cls, value: Any) -> Any:
        """No NaN, Infinity, lone surrogate or integer past 64 bits anywhere (app.runs.jsonsafe)."""
        if isinstance(value, dict):
            for name, ceiling in MAX_LIST_ITEMS.items():
                items = value.get(name)
                if isinstance(items, list) and len(items) > ceiling:
                    raise PydanticCustomError(
                        "json_value",
                        "{path}: {problem}",
                        {"path": name, "problem": f"has {len(items):,} items; at most {ceiling}"},
                    )
        found = json_problem(value)
        if found is not None:
            path, problem = found
            raise PydanticCustomError(
                "json_value", "{path}: {problem}", {"path": path, "problem": problem}
            )
        return value

    @field_validator(*DEEP_FIELDS, mode="before")
    @classmethod
    def _not_too_deep(cls, value: Any) -> Any:
        if json_depth(value) > MAX_JSON_DEPTH:
            raise ValueError(f"nests deeper than {MAX_JSON_DEPTH} levels of objects and arrays")
        return value


__all__ = [
    "MAX_JSON_DEPTH",
    "STRICT",
    "AgentIn",
    "ApprovalIn",
    "ClientToolIn",
    "HttpToolIn",
    "RunRequest",
    "RunSettingsIn",
    "ScriptedReplyIn",
    "ScriptedToolCallIn",
    "ScriptedUsageIn",
    "json_depth",
    "json_integer",
]
