"""Request and response bodies of the HTTP API (the run's own shapes live in app.runs)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.runs.spec import RunRequest
from app.runs.view import RunView


class RunCreate(RunRequest):
    """POST /runs: the run, plus how to answer."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra=RunRequest.model_config.get("json_schema_extra")
    )

    stream: bool = Field(
        False,
        description="Answer with the run's SSE stream itself (200 text/event-stream) instead of 202 and the run.",
    )
    on_disconnect: Literal["continue", "cancel"] = Field(
        "continue", description="With stream: what a dropped stream does to the run."
    )

    def run_request(self) -> RunRequest:
        return RunRequest.model_validate(
            self.model_dump(exclude={"stream", "on_disconnect"}, exclude_unset=True)
        )


class RunList(BaseModel):
    runs: list[RunView]
    next_cursor: str | None = Field(
        None, description="Pass as ?cursor= for the next (older) page; null on the last page."
    )


class EventOut(BaseModel):
    """One event: the envelope, then the type's payload fields."""

    model_config = ConfigDict(extra="allow")
    run_id: str
    seq: int = Field(description="1, 2, 3 … with no gaps; the SSE id.")
    type: str = Field(
        description="run.queued, run.started, step.started, thought, token, llm.call, llm.retry, action, observation, intervention, run.completed, run.incomplete, run.failed, run.cancelled."
    )
    ts: str = Field(description="When it was appended (ISO 8601, UTC).")
    step: int


class EventPage(BaseModel):
    events: list[EventOut]
    next_after: int = Field(description="Pass as ?after= for the next page.")
    done: bool = Field(description="True when the page ends with the terminal event.")


class ToolInfo(BaseModel):
    name: str
    description: str
    parameters: dict[str, Any] = Field(description="JSON schema of the arguments.")
    idempotent: bool = Field(
        description="False: repeated identical calls run until past the repetition threshold."
    )


class StreamToken(BaseModel):
    token: str = Field(description="Use as ?token= on the run's events URL.")
    expires_at: int = Field(description="Epoch seconds.")
    events_url: str


class SettingInfo(BaseModel):
    default: Any
    cap: Any = Field(None, description="The largest value a request may ask for; null = none.")
    description: str
    kind: Literal["integer", "number", "boolean", "choice"] = Field(
        description="The value's type; a choice is one of `choices`."
    )
    choices: list[str] | None = Field(None, description="The allowed values of a choice.")
    minimum: float | None = Field(
        None, description="The lower bound (timeouts must be above it, others at least it)."
    )


class ServerInfo(BaseModel):
    settings: dict[str, SettingInfo] = Field(
        description="Every per-run setting with its default and cap."
    )
    default_model: str
    models: list[str] = Field(
        description="Model names this server offers by name (an endpoint accepts others too)."
    )
    auth: bool = Field(description="Whether requests need an API key.")


class Health(BaseModel):
    status: str
    detail: str | None = None
