"""A typed answer over AG-UI (DESIGN §12, §16): `output_schema` in forwardedProps.finishline,
validated like POST /runs, and RUN_FINISHED's `result.output` the validated value, beside the
answer's JSON text as the assistant's message."""

from __future__ import annotations

import json

from tests.agui.kit import agent_input, of_type, scripted, stream, user
from tests.api.kit import settings
from tests.fakes.service import api_client

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


async def test_run_finished_carries_the_validated_output() -> None:
    answering = {
        "tool_calls": [{"name": "task_finished", "arguments": {"answer": {"city": "Oslo"}}}]
    }
    body = agent_input(user("Where?"), finishline=scripted(answering, output_schema=SCHEMA))
    async with api_client(settings()) as client:
        response, events = await stream(client, body)
    assert response.status_code == 200, response.text
    (finished,) = of_type(events, "RUN_FINISHED")
    result = finished["result"]
    assert (result["output"], result["reason"], result["status"]) == (
        {"city": "Oslo"},
        "finished",
        "completed",
    )
    assert json.loads(result["answer"]) == {"city": "Oslo"}
    said = "".join(e["delta"] for e in of_type(events, "TEXT_MESSAGE_CONTENT"))
    assert json.loads(said) == {"city": "Oslo"}


async def test_an_invalid_schema_is_refused_before_any_event() -> None:
    body = agent_input(user("Where?"), finishline=scripted(output_schema={"type": "objekt"}))
    async with api_client(settings()) as client:
        response = await client.post("/ag-ui", json=body, headers={"Accept": "text/event-stream"})
    assert response.status_code == 422
    assert response.json()["error"]["details"]["field"].endswith("output_schema")
