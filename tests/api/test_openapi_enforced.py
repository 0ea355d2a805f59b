"""The OpenAPI document declares what the handlers enforce, so a client or fuzzer that follows
it sends nothing the service refuses: each body here is judged twice, by the published schema
(JSON Schema 2020-12, the whole document as its root) and by the service, and both must agree.
AG-UI's input (a turn brings the user's message unless it answers interrupts; text content; a
frontend tool's parameters an object) and the data a request holds as it is (an approval's
`arguments`, a run's `metadata`: integers within 64 bits). One rule JSON Schema cannot state
(which message is last) is pinned as the one known difference, and said in the document."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.agui.kit import agent_input, scripted, user
from tests.api.kit import finish, settings
from tests.fakes.service import api_client

INT64_MAX = 2**63 - 1
ASSISTANT = {"id": "a1", "role": "assistant", "content": "hello"}
IMAGE = {"type": "image", "source": {"type": "url", "value": "https://example.com/cat.png"}}
RUN = "run_00000000000000000000000000"


def validator(document: dict[str, Any], component: str) -> Draft202012Validator:
    root = {"components": document["components"], "$ref": f"#/components/schemas/{component}"}
    return Draft202012Validator(root)


@pytest.fixture
async def client() -> Any:
    async with api_client(settings()) as client:
        yield client


def turn(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return agent_input(*messages, finishline=scripted(finish("ok")), **fields)


AGUI_CASES = {
    "a new message": (turn(user("hi")), True),
    "the history HttpAgent re-sends, then the new message": (
        turn(user("hi"), ASSISTANT, user("again", id="u2")),
        True,
    ),
    "no message at all": ({**turn(), "messages": []}, False),
    "no user message": (turn(ASSISTANT), False),
    "an image as the task": (
        turn({"id": "u1", "role": "user", "content": [{"type": "text", "text": "a"}, IMAGE]}),
        False,
    ),
    "a frontend tool whose parameters are not an object": (
        turn(user("hi"), tools=[{"name": "pick", "description": "d", "parameters": "text"}]),
        False,
    ),
    "an answer to interrupts (CopilotKit's resume shape)": (
        turn(
            user("hi"),
            {"id": "t1", "role": "tool", "toolCallId": "c1", "content": '{"approved":true}'},
            resume=[{"interruptId": "c1", "status": "resolved", "payload": {"approved": True}}],
        ),
        True,  # the schema takes it; this new thread has no such interrupt: 404, not 422
    ),
}


@pytest.mark.parametrize("case", list(AGUI_CASES))
async def test_the_ag_ui_input_the_document_allows_is_the_input_the_service_takes(
    client: httpx.AsyncClient, case: str
) -> None:
    body, allowed = AGUI_CASES[case]
    document = (await client.get("/openapi.json")).json()

    declared_valid = validator(document, "AgUi.RunAgentInput").is_valid(body)
    response = await client.post("/ag-ui", json=body)

    assert declared_valid is allowed
    assert (response.status_code != 422) is allowed, response.text


async def test_the_one_rule_json_schema_cannot_state_is_in_the_documents_words(
    client: httpx.AsyncClient,
) -> None:
    """Ending with the assistant's message (no new one, nothing answered): the schema cannot
    say which item is last, so it takes this body; the service refuses it, as the document's
    description of `messages` says."""
    body = turn(user("hi"), ASSISTANT)
    document = (await client.get("/openapi.json")).json()

    response = await client.post("/ag-ui", json=body)

    assert validator(document, "AgUi.RunAgentInput").is_valid(body)
    assert response.status_code == 422
    assert response.json()["error"]["details"]["field"] == "messages"
    described = document["components"]["schemas"]["AgUi.RunAgentInput"]["properties"]
    assert "its last message is the user's new message" in described["messages"]["description"]


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        (INT64_MAX, True),
        (-(2**63), True),
        ([{"deep": INT64_MAX}], True),
        (1.5, True),
        (INT64_MAX + 1, False),
        ({"deep": [-(2**63) - 1]}, False),
    ],
)
async def test_data_held_as_it_is_has_integers_within_64_bits_in_schema_and_service(
    client: httpx.AsyncClient, value: Any, allowed: bool
) -> None:
    document = (await client.get("/openapi.json")).json()
    decisions = {"decisions": [{"call_id": "c1", "approve": True, "arguments": {"n": value}}]}
    run = {"task": "t", "model": "scripted", "model_script": [finish()], "metadata": {"n": value}}

    approvals = await client.post(f"/runs/{RUN}/approvals", json=decisions)
    created = await client.post("/runs", json=run)

    assert validator(document, "ApprovalsIn").is_valid(decisions) is allowed
    assert validator(document, "RunCreate").is_valid(run) is allowed
    # refused for the value (422) or taken: the run is unknown (404), the new one made (202)
    assert approvals.status_code == (404 if allowed else 422), approvals.text
    assert created.status_code == (202 if allowed else 422), created.text
