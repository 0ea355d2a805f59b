"""What the AG-UI tests share: RunAgentInput bodies, streams read and every event checked with
the protocol's own models (`ag_ui.core.Event`, the discriminated union of every event)."""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import TypeAdapter

from tests.api.kit import sse
from tests.fakes.service import SSE

EVENT: TypeAdapter[Any] | None = None


def protocol_event(data: dict[str, Any]) -> Any:
    """`data` validated as an AG-UI event by ag-ui-protocol's own models (strictly: an event
    that validates only by ignoring a field would not be what the protocol says)."""
    global EVENT
    if EVENT is None:
        from ag_ui.core import Event

        EVENT = TypeAdapter(Event)
    event = EVENT.validate_python(data)
    assert not event.model_extra, f"fields the protocol does not know: {event.model_extra}"
    return event


def user(content: str, id: str = "u1") -> dict[str, Any]:
    return {"id": id, "role": "user", "content": content}


def agent_input(
    *messages: dict[str, Any],
    thread: str = "thread-1",
    run: str = "agui-run-1",
    finishline: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "threadId": thread,
        "runId": run,
        "messages": list(messages) or [user("a task")],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {"finishline": finishline} if finishline is not None else {},
    }
    return {**body, **fields}


def scripted(*replies: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """forwardedProps.finishline for a scripted run."""
    return {"model": "scripted", "model_script": list(replies), **fields}


async def stream(
    client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[httpx.Response, list[SSE]]:
    """A whole POST /ag-ui stream; each event checked against the protocol's models."""
    response, events = await sse(
        client,
        "POST",
        "/ag-ui",
        json=body,
        headers={"Accept": "text/event-stream", **(headers or {})},
    )
    for event in events:
        protocol_event(event.data)
    return response, events


def types(events: list[SSE]) -> list[str]:
    return [e.data["type"] for e in events]


def of_type(events: list[SSE], kind: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.data["type"] == kind]
