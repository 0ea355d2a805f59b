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
    PrivateAttr,
    StringConstraints,
    field_validator,
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
from app.runs.settingspec import GraderIn, OutcomeIn, RunSettingsIn
from app.runs.toolspec import (
    AGENT_NAME,
    CHILD_FIELDS,
    MAX_AGENTS,
    MAX_LIST_ITEMS,
    AgentIn,
    ApprovalIn,
    ClientToolIn,
    HttpToolIn,
    ScriptedReplyIn,
    ScriptedToolCallIn,
    ScriptedUsageIn,
    agent_names_only,
)

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
    outcome: OutcomeIn | None = Field(
        None,
        description="Done means a good answer (DESIGN §22): the answer is graded against "
        "`rubric` by one LLM call in a context of its own (event `outcome.graded`); an unmet "
        "one gets the grader's feedback (intervention `outcome_unmet`) and the run goes on, up "
        "to `max_revisions` revisions, then ends incomplete with outcome_unmet and its last "
        "answer. With output_schema, the schema is checked first. The grader's calls count in "
        "the run's usage, cost, budgets and deadline.",
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
        json_schema_extra=agent_names_only,
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


def child_request(agent: AgentIn, task: str, parent_model: str | None = None) -> RunRequest:
    """The request of the child run a call of `agent` with `task` starts (not for an
    `a2a_url` agent). An agent that names no model, no profile and no script runs on
    `parent_model`."""
    given = {name for name in CHILD_FIELDS if name in agent.model_fields_set}
    fields = RunRequest.model_fields
    values = {n: f.get_default(call_default_factory=True) for n, f in fields.items()}
    values |= {name: getattr(agent, name) for name in given} | {"task": task}
    if given.isdisjoint({"model", "agent", "model_script"}) and parent_model is not None:
        values["model"] = parent_model
        given.add("model")
    return RunRequest.model_construct({"task", *given}, **values)


__all__ = [
    "MAX_JSON_DEPTH",
    "STRICT",
    "AgentIn",
    "ApprovalIn",
    "ClientToolIn",
    "GraderIn",
    "HttpToolIn",
    "OutcomeIn",
    "RunRequest",
    "RunSettingsIn",
    "ScriptedReplyIn",
    "ScriptedToolCallIn",
    "ScriptedUsageIn",
    "json_depth",
    "json_integer",
]
