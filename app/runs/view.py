"""The public shape of a run: what GET /runs/{id} answers and what a webhook receives."""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from app.engine.policies import Limits
from app.runs.records import (
    ForkedFrom,
    PendingApproval,
    RunErrorInfo,
    RunRecord,
    RunResult,
    RunStatus,
    Usage,
    WebhookState,
)

MASK = "***"


class RunLinks(BaseModel):
    """Where to find the run, follow it and cancel it."""

    self: str = Field(description="This run.")
    events: str = Field(
        description="Its event stream (SSE), or a JSON page with Accept: application/json."
    )
    cancel: str = Field(description="POST here to cancel it.")


class RunView(BaseModel):
    """A run: what was asked, how it went, how it ended."""

    id: str = Field(description="The run's identifier.")
    status: RunStatus = Field(
        description="queued, running, requires_action (waiting for a person: see "
        "pending_approvals), completed (finished/answered), incomplete (a limit ended it), "
        "failed, cancelled."
    )
    created_at: datetime = Field(description="When it was accepted.")
    started_at: datetime | None = Field(None, description="When it left the queue.")
    ended_at: datetime | None = Field(None, description="When it ended.")
    task: str = Field(description="What the agent was asked to do.")
    system_prompt: str | None = Field(
        None,
        description="The system prompt it runs with: the request's, or the one inherited from its previous run.",
    )
    agent: str | None = Field(
        None,
        description="The agent profile it was made from (its values the run's defaults), or null.",
    )
    model: str = Field(description="The model that runs it.")
    tools: list[str] = Field(description="Tools it may call, as the request named them.")
    mcp_servers: list[str] = Field(
        default_factory=list, description="MCP servers whose every tool it may call."
    )
    http_tools: list[dict[str, Any]] = Field(
        default_factory=list, description="Tools declared in the request; header values masked."
    )
    client_tools: list[dict[str, Any]] = Field(
        default_factory=list, description="Tools the client runs (each call waits for its result)."
    )
    output_schema: dict[str, Any] | None = Field(
        None,
        description="The JSON Schema its answer must validate against (the value is "
        "result.output), or null.",
    )
    outcome: dict[str, Any] | None = Field(
        None,
        description="The rubric its answer is graded against and its grader (DESIGN §22; "
        "max_revisions resolved in settings), or null.",
    )
    settings: dict[str, Any] = Field(description="Every per-run setting, resolved.")
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="The request's own data, as sent."
    )
    result: RunResult | None = Field(None, description="Set once the run has ended.")
    error: RunErrorInfo | None = Field(None, description="Set when it failed.")
    usage: Usage = Field(description="What it has spent so far.")
    webhook: WebhookState | None = Field(
        None, description="Delivery state of the run's webhook, if it has one."
    )
    previous_run_id: str | None = Field(
        None, description="The run this one continues (a follow-up), or null."
    )
    thread_id: str | None = Field(
        None,
        description="The thread (conversation, DESIGN §19) whose run it is (GET "
        "/threads/{id}), or null.",
    )
    schedule_id: str | None = Field(
        None,
        description="The schedule whose firing started it (GET /schedules/{id}/firings), or null.",
    )
    forked_from: ForkedFrom | None = Field(
        None, description="A fork's origin (POST /runs/{id}/fork): the run and step; or null."
    )
    agents: list[str] = Field(
        default_factory=list,
        description="Its sub-agents (tools NAME(task) of its model, DESIGN §15), by name.",
    )
    parent_run_id: str | None = Field(
        None,
        description="A sub-agent's child run: the run whose call started it (GET "
        "/runs?parent_run_id= lists a run's children); null for a run a request started.",
    )
    parent_call_id: str | None = Field(
        None, description="With parent_run_id: that run's call (its action's call_id)."
    )
    trace_id: str | None = Field(
        None,
        description="The run's OpenTelemetry trace id (32 hex digits) when the server exports traces; the caller's own when POST /runs carried a `traceparent` header.",
    )
    pending_approvals: list[PendingApproval] = Field(
        default_factory=list,
        description="The tool calls the run waits on, undecided ones only (requires_action); "
        "decide them with POST /runs/{id}/approvals.",
    )
    links: RunLinks = Field(description="Related URLs.")


_LIMIT_FIELDS = tuple(f.name for f in fields(Limits))


def settings_dict(limits: Limits) -> dict[str, Any]:
    """`dataclasses.asdict(limits)` at a fourteenth of the cost (every field is a scalar,
    so there is nothing to copy deeply): the run's settings as its view and first event
    show them."""
    return {name: getattr(limits, name) for name in _LIMIT_FIELDS}


def links_for(run_id: str) -> RunLinks:
    return RunLinks(
        self=f"/runs/{run_id}", events=f"/runs/{run_id}/events", cancel=f"/runs/{run_id}/cancel"
    )


def to_view(record: RunRecord) -> RunView:
    request = record.request
    http_tools = [
        {
            **tool.model_dump(mode="json", exclude_none=True),
            "headers": dict.fromkeys(tool.headers, MASK),
        }
        for tool in request.http_tools
    ]
    return RunView(
        id=record.id,
        status=record.status,
        created_at=record.created_at,
        started_at=record.started_at,
        ended_at=record.ended_at,
        task=request.task,
        system_prompt=record.system_prompt,
        agent=request.agent,
        model=record.model,
        tools=list(request.tools),
        mcp_servers=list(request.mcp_servers),
        http_tools=http_tools,
        client_tools=[t.model_dump(mode="json") for t in request.client_tools],
        output_schema=request.output_schema,
        outcome=None if request.outcome is None else request.outcome.model_dump(mode="json"),
        settings=settings_dict(record.settings),
        metadata=request.metadata,
        result=record.result,
        error=record.error,
        usage=record.usage,
        webhook=record.webhook,
        previous_run_id=record.previous_run_id,
        thread_id=record.thread_id,
        schedule_id=record.schedule_id,
        forked_from=record.forked_from,
        agents=list(request.agents or ()),
        parent_run_id=record.parent_run_id,
        parent_call_id=record.parent_call_id,
        trace_id=record.trace_id,
        pending_approvals=(
            record.approval.undecided()
            if record.approval is not None and record.status == RunStatus.REQUIRES_ACTION
            else []
        ),
        links=links_for(record.id),
    )
