"""What a request declares beside its task and settings: its HTTP and client tools, the
scripted model's replies, and which tools wait for a person. Shapes only; `app.assembly`
checks what depends on the server."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.runs.jsonsafe import STRICT, json_integer


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
