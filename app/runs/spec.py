"""What a client may ask of a run: validated shapes, documented for the OpenAPI schema.

Bounds that depend on the server (caps, allow-lists, registered tools) are checked by
`app.runs.factory`, which names the offending field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

STRICT = ConfigDict(extra="forbid", strict=True)
"""Unknown fields refused; values taken as JSON types only, as the schema says (no `true`
for 1, no "30" for 30)."""
MAX_JSON_DEPTH = 32
"""How deeply free-form JSON (metadata, tool schemas, scripted arguments) may nest: far past
any real use, well short of what serializing it again can handle."""


def json_integer(value: Any) -> Any:
    """JSON Schema's integers include 2.0: take it as 2 (strict mode refuses any float)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def json_depth(value: Any) -> int:
    """How many levels of objects and arrays nest in `value` (0 for a scalar); no recursion."""
    depth, level = 0, [value]
    while level := [v for v in level if isinstance(v, dict | list)]:
        depth += 1
        level = [c for v in level for c in (v.values() if isinstance(v, dict) else v)]
    return depth


class RunSettingsIn(BaseModel):
    """Per-run settings; each omitted one takes the server's default. Caps: GET /settings."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"max_steps": 8, "max_time_s": 30, "progress": True}]},
    )

    @field_validator("*", mode="before")
    @classmethod
    def _json_integers(cls, value: Any) -> Any:
        return json_integer(value)

    max_steps: int | None = Field(
        None, ge=1, description="LLM turns before the run ends with max_steps (default 10)."
    )
    max_time_s: float | None = Field(
        None,
        gt=0,
        description="Whole-run deadline in seconds; interrupts in-flight calls (default 60).",
    )
    tool_timeout_s: float | None = Field(
        None,
        gt=0,
        description="Timeout of one tool call; the model is told and the run goes on (default 30).",
    )
    llm_timeout_s: float | None = Field(
        None,
        gt=0,
        description="Timeout of one LLM call attempt, also capped by the deadline (default 60).",
    )
    final_answer_timeout_s: float | None = Field(
        None, gt=0, description="Timeout of the degraded final-answer call (default 15)."
    )
    stop_tool: bool | None = Field(
        None,
        description="Require the task_finished tool to end the run; false: a plain answer ends it (default true).",
    )
    max_nudges: int | None = Field(
        None,
        ge=0,
        description="Stop prompts in a row before the run ends with nudge_limit (default 3).",
    )
    llm_retries: int | None = Field(
        None, ge=0, description="Retries on network errors, timeouts, 408/409/429/5xx (default 3)."
    )
    llm_retry_delay_s: float | None = Field(
        None,
        ge=0,
        description="First retry delay, doubled each retry with jitter; Retry-After wins (default 10).",
    )
    repetition_threshold: int | None = Field(
        None,
        ge=0,
        description="The N-th identical tool call gets a hint instead of running; 0 = off (default 2).",
    )
    max_tool_result_chars: int | None = Field(
        None,
        ge=0,
        description="What the model sees of one tool result; 0 = no truncation (default 2000).",
    )
    progress: bool | None = Field(
        None,
        description="Inject a progress message before each step after the first (default false).",
    )
    max_total_tokens: int | None = Field(
        None, ge=1, description="Token budget of the run; null = none (default null)."
    )
    max_context_tokens: int | None = Field(
        None,
        ge=1,
        description="Cap on one LLM call's prompt; over it the oldest tool results are elided (default null).",
    )
    final_answer_on_limit: bool | None = Field(
        None,
        description="At a step, time or token limit, ask once more for a best answer without tools (default true).",
    )
    stream_tokens: bool | None = Field(
        None, description="Stream LLM output as token events (default false)."
    )
    prompt_language: Literal["en", "zh"] | None = Field(
        None, description="Language of the texts the runtime injects (default en)."
    )


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
        default_factory=dict, description="Sent with every call; values are never shown back."
    )
    timeout_s: float | None = Field(
        None, gt=0, description="Per-call timeout; defaults to the run's tool_timeout_s."
    )
    idempotent: bool = Field(
        True,
        description="False for tools like job polling: repeats run until past the repetition threshold.",
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
        description="Names of tools from GET /tools (built-in, or an MCP server's NAME__TOOL).",
    )
    mcp_servers: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="MCP servers (GET /tools/mcp-servers) whose every tool this run may use.",
    )
    http_tools: list[HttpToolIn] = Field(
        default_factory=list, description="Tools declared in this request, called over HTTP."
    )
    settings: RunSettingsIn = Field(default_factory=RunSettingsIn, description="Per-run settings.")
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Your own data, kept on the run."
    )
    model_script: list[ScriptedReplyIn] | None = Field(
        None, description="Replies of the scripted model, one per LLM call."
    )
    webhook: str | None = Field(
        None,
        max_length=2000,
        description="URL (allow-listed host) that receives the run as JSON once it ends.",
    )

    @field_validator("metadata", "http_tools", "model_script", mode="before")
    @classmethod
    def _not_too_deep(cls, value: Any) -> Any:
        if json_depth(value) > MAX_JSON_DEPTH:
            raise ValueError(f"nests deeper than {MAX_JSON_DEPTH} levels of objects and arrays")
        return value
