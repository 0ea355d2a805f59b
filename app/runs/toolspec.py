"""What a request declares beside its task and settings: its HTTP and client tools, the
scripted model's replies, which tools wait for a person, and its sub-agents (DESIGN §15: tools
of the run whose call starts a child run made of their fields, `app.runs.spec.child_request`, or
calls a remote A2A agent). Shapes only; `app.assembly` checks what depends on the server."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    StringConstraints,
    field_validator,
    model_serializer,
    model_validator,
)

from app.runs.jsonsafe import STRICT, json_integer
from app.runs.settingspec import OutcomeIn, RunSettingsIn


class HttpToolIn(BaseModel):
    """A tool declared in the request: called over HTTP with the model's arguments as JSON."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "name": "lookup_order",
                    "description": "Look up an order by id.",
                    "parameters": {
                        "type": "object",
                        "properties": {"order_id": {"type": "string"}},
                        "required": ["order_id"],
                    },
                    "url": "https://api.example.com/orders/lookup",
                }
            ]
        },
    )

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="Tool name the model calls.")
    description: str = Field(max_length=2000, description="What the tool does, for the model.")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON schema (type object) of the arguments. A `$ref` resolves only "
        "within the schema (nothing is fetched); patterns are matched by RE2 (no "
        "backreferences or lookaround).",
    )
    url: str = Field(max_length=2000, description="Endpoint; its host must be allow-listed.")
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = Field(
        "POST",
        description="POST/PUT/PATCH send the arguments as a JSON body; GET/DELETE as query parameters.",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        max_length=32,
        description="Sent with every call (at most 32); values are never shown back.",
    )
    timeout_s: float | None = Field(
        None, gt=0, description="Per-call timeout; defaults to the run's tool_timeout_s."
    )
    idempotent: bool = Field(
        True,
        description="False for tools like job polling or ones that act (send, pay): repeats run "
        "until past the repetition threshold, and a call in flight when its replica died is "
        "not run again after the takeover (the model is told its outcome is unknown); its "
        "call also waits until its action event is committed, an idempotent tool's does not.",
    )
    requires_approval: bool | None = Field(
        None,
        description="true: each call waits for a person's approval (POST /runs/{id}/approvals). "
        "Omitted (stored as such): false.",
    )


class ClientToolIn(BaseModel):
    """A tool the client runs (AG-UI's frontend tools): offered to the model, never executed
    by the server; each call waits for the client's result (DESIGN §9, §16)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "name": "confirm_order",
                    "description": "Ask the user to confirm the order in the page.",
                    "parameters": {
                        "type": "object",
                        "properties": {"order_id": {"type": "string"}},
                        "required": ["order_id"],
                    },
                }
            ]
        },
    )

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="Tool name the model calls.")
    description: str = Field(max_length=2000, description="What the tool does, for the model.")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON schema (type object) of the arguments. A `$ref` resolves only "
        "within the schema (nothing is fetched); patterns are matched by RE2 (no "
        "backreferences or lookaround).",
    )


class ScriptedToolCallIn(BaseModel):
    """One tool call of a scripted reply."""

    model_config = STRICT
    name: str = Field(description="The tool to call.")
    arguments: dict[str, Any] | str = Field(
        default_factory=dict, description="An object, or raw text to script malformed JSON."
    )
    id: str | None = Field(None, description="Call id; generated when omitted.")


class ScriptedUsageIn(BaseModel):
    """Token usage the scripted model reports for a reply."""

    model_config = STRICT
    prompt_tokens: int = Field(ge=0, description="Prompt tokens to report.")
    completion_tokens: int = Field(ge=0, description="Completion tokens to report.")

    @field_validator("*", mode="before")
    @classmethod
    def _json_integers(cls, value: Any) -> Any:
        return json_integer(value)


class ScriptedReplyIn(BaseModel):
    """One reply of the scripted model, used for one LLM call."""

    model_config = STRICT
    content: str | None = Field(None, description="The reply's text (a thought, or the answer).")
    tool_calls: list[ScriptedToolCallIn] = Field(
        default_factory=list, description="Tool calls of the reply."
    )
    usage: ScriptedUsageIn | None = Field(None, description="Reported usage; omitted: estimated.")
    delay_s: float = Field(0, ge=0, le=600, description="Latency before this reply.")


class ApprovalIn(BaseModel):
    """Which of the run's tools wait for a person before each call (DESIGN §9)."""

    model_config = STRICT
    tools: list[str] = Field(
        max_length=256,
        description="Names of the run's tools (registered or http_tools) whose calls wait "
        "for approval: the run's status becomes requires_action until POST "
        "/runs/{id}/approvals decides them.",
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


def agent_names_only(schema: dict[str, Any]) -> None:
    """In the schema of a field of agents by name: no key but a name (`AGENT_NAME`)."""
    for branch in schema.get("anyOf", [schema]):
        if "patternProperties" in branch:
            branch["additionalProperties"] = False


_TEXT: dict[str, JsonValue] = {"type": "string"}
CHILD_FIELDS = (
    "system_prompt",
    "model",
    "tools",
    "mcp_servers",
    "http_tools",
    "settings",
    "approval",
    "model_script",
    "output_schema",
    "outcome",
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
    outcome: OutcomeIn | None = Field(
        None, description="The child run's outcome: its answer graded against a rubric."
    )
    agents: dict[Annotated[str, StringConstraints(pattern=AGENT_NAME)], AgentIn] = Field(
        default_factory=dict,
        max_length=MAX_AGENTS,
        description="The child run's own sub-agents (depth: FINISHLINE_MAX_AGENT_DEPTH).",
        json_schema_extra=agent_names_only,
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
