"""What a client may ask of a run: validated shapes, documented for the OpenAPI schema.

Bounds that depend on the server (caps, allow-lists, registered tools) are checked by
`app.assembly`, which names the offending field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator
from pydantic_core import PydanticCustomError

from app.engine.declarations import Declared, declared
from app.engine.policies import Limits
from app.runs.jsonsafe import INT64_MAX, INT64_MIN, json_problem

STRICT = ConfigDict(extra="forbid", strict=True)
"""Unknown fields refused; values taken as JSON types only, as the schema says (no `true`
for 1, no "30" for 30)."""
MAX_JSON_DEPTH = 32
MAX_LIST_ITEMS = {"tools": 256, "http_tools": 256, "client_tools": 256, "model_script": 1000}
"""Fixed ceilings on the lists of a request, checked before anything in them is validated,
so a huge list is refused in microseconds. Server settings (max_tools, max_script_replies)
set the working caps below these."""
"""How deeply free-form JSON (metadata, tool schemas, scripted arguments) may nest: far past
any real use, well short of what serializing it again can handle."""


def json_integer(value: Any) -> Any:
    """JSON Schema's integers include 2.0: take it as 2 (strict mode refuses any float). One
    past 64 bits (`1e19`) is refused, as the integer literal would be (`app.runs.jsonsafe`):
    taken as it is, it was stored and then could not be read back."""
    if isinstance(value, float) and value.is_integer():
        if not INT64_MIN <= value <= INT64_MAX:
            raise PydanticCustomError("int64_range", "is an integer outside the 64-bit range")
        return int(value)
    return value


def json_depth(value: Any) -> int:
    """How many levels of objects and arrays nest in `value` (0 for a scalar); no recursion."""
    depth, level = 0, [value]
    while level := [v for v in level if isinstance(v, dict | list)]:
        depth += 1
        level = [c for v in level for c in (v.values() if isinstance(v, dict) else v)]
    return depth


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
        description="JSON schema (type object) of the arguments.",
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
        "not run again after the takeover (the model is told its outcome is unknown).",
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
        description="JSON schema (type object) of the arguments.",
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
        "`parameters`.",
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
    previous_run_id: str | None = Field(
        None,
        pattern=r"^run_[0-9A-Z]{26}$",
        description="Continue that ended run: this run starts from its conversation (its answer "
        "as the last assistant message), then `task`. Its system prompt is inherited unless "
        "this request gives one; tools, model and settings come from this request.",
    )

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

    @field_validator(
        "metadata", "http_tools", "client_tools", "model_script", "output_schema", mode="before"
    )
    @classmethod
    def _not_too_deep(cls, value: Any) -> Any:
        if json_depth(value) > MAX_JSON_DEPTH:
            raise ValueError(f"nests deeper than {MAX_JSON_DEPTH} levels of objects and arrays")
        return value
