"""POST /runs/{id}/messages (steering) and POST /runs with previous_run_id (follow-ups): what
the API accepts and refuses. Where the messages land is tested in e2e/test_conversation.py."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tests.api.kit import (
    cancel,
    create,
    error_of,
    finishing,
    hanging,
    json_events,
    run_to_end,
    settings,
)
from tests.fakes.service import api_client

UNKNOWN = "run_00000000000000000000000000"
K1 = {"Authorization": "Bearer first-key-6f1d2c9a8b7e"}
K2 = {"Authorization": "Bearer second-key-3a4b5c6d7e8f"}


def said(events: dict[str, Any]) -> list[tuple[str, bool, int]]:
    return [
        (e["content"], e["delivered"], e["step"])
        for e in events["events"]
        if e["type"] == "user.message"
    ]


async def until_step_started(client: Any, run_id: str) -> None:
    """Wait for the run's first step.started: its inbox was read for step 1 just before it."""
    with anyio.fail_after(5):
        while True:
            events = (await json_events(client, run_id))["events"]
            if any(e["type"] == "step.started" for e in events):
                return
            await anyio.sleep(0.005)


async def test_messages_to_a_queued_run_join_before_its_first_llm_call_in_order() -> None:
    async with api_client(settings(max_concurrent_runs=1)) as client:
        blocker = await create(client, hanging())
        queued = await create(client, finishing("ok"))

        for text in ("one", "two", "three"):
            response = await client.post(f"/runs/{queued['id']}/messages", json={"content": text})
            assert response.status_code == 202, response.text
            assert response.json()["status"] == "queued"
        await cancel(client, blocker["id"])
        response = await client.get(f"/runs/{queued['id']}/wait", params={"timeout_s": 10})

        assert response.json()["status"] == "completed"
        events = await json_events(client, queued["id"])
        assert said(events) == [("one", True, 1), ("two", True, 1), ("three", True, 1)]
        types = [e["type"] for e in events["events"]]
        assert types.index("step.started") < types.index("user.message") < types.index("llm.call")


async def test_messages_left_when_a_run_is_cancelled_are_logged_undelivered() -> None:
    async with api_client(settings()) as client:
        run = await create(client, hanging())
        await until_step_started(client, run["id"])  # its one LLM call is in flight
        await client.post(f"/runs/{run['id']}/messages", json={"content": "hello?"})

        await cancel(client, run["id"])

        events = await json_events(client, run["id"])
        assert said(events) == [("hello?", False, 1)]
        assert events["events"][-1]["type"] == "run.cancelled"


async def test_a_message_to_an_ended_run_is_409() -> None:
    async with api_client(settings()) as client:
        run = await run_to_end(client, finishing())
        response = await client.post(f"/runs/{run['id']}/messages", json={"content": "more"})
        error = error_of(response, 409, "run_already_ended")
        assert "previous_run_id" in error["message"]


async def test_a_message_to_an_unknown_run_is_404() -> None:
    async with api_client(settings()) as client:
        response = await client.post(f"/runs/{UNKNOWN}/messages", json={"content": "x"})
        error_of(response, 404, "not_found")


async def test_a_message_to_another_keys_run_is_404() -> None:
    keys = [K1["Authorization"][7:], K2["Authorization"][7:]]
    async with api_client(settings(api_keys=keys)) as client:
        run = await create(client, hanging(), K1)
        response = await client.post(
            f"/runs/{run['id']}/messages", json={"content": "x"}, headers=K2
        )
        error_of(response, 404, "not_found")
        await cancel(client, run["id"], K1)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"content": ""}, "content"),
        ({}, "content"),
        ({"content": 5}, "content"),
        ({"content": "x", "role": "system"}, "role"),
    ],
)
async def test_an_invalid_message_is_422_naming_the_field(body: dict[str, Any], field: str) -> None:
    async with api_client(settings()) as client:
        run = await create(client, hanging())
        response = await client.post(f"/runs/{run['id']}/messages", json=body)
        error = error_of(response, 422, "validation_error")
        assert error["details"]["errors"][0]["field"] == field
        await cancel(client, run["id"])


async def test_a_message_over_the_server_cap_is_422_naming_the_cap() -> None:
    async with api_client(settings(max_message_chars=10)) as client:
        run = await create(client, hanging())
        response = await client.post(f"/runs/{run['id']}/messages", json={"content": "x" * 11})
        error = error_of(response, 422, "validation_error")
        assert error["details"] == {"field": "content", "cap": 10}
        await cancel(client, run["id"])


async def test_past_the_pending_cap_a_message_is_429() -> None:
    async with api_client(settings(max_pending_messages=2)) as client:
        run = await create(client, hanging())
        for text in ("a", "b"):
            await client.post(f"/runs/{run['id']}/messages", json={"content": text})
        response = await client.post(f"/runs/{run['id']}/messages", json={"content": "c"})
        error = error_of(response, 429, "too_many_messages")
        assert error["details"]["cap"] == 2
        await cancel(client, run["id"])


async def test_a_message_must_be_json() -> None:
    async with api_client(settings()) as client:
        run = await create(client, hanging())
        response = await client.post(f"/runs/{run['id']}/messages", content=b"hi")
        error_of(response, 415, "unsupported_media_type")
        await cancel(client, run["id"])


# -- follow-ups -------------------------------------------------------------------------------


async def test_a_follow_up_shows_its_previous_run_and_inherits_its_system_prompt() -> None:
    async with api_client(settings()) as client:
        first = await run_to_end(client, finishing("1", system_prompt="Be brief."))
        second = await run_to_end(client, finishing("2", previous_run_id=first["id"]))
        third = await run_to_end(
            client, finishing("3", previous_run_id=second["id"], system_prompt="Be long.")
        )
        fourth = await run_to_end(client, finishing("4", previous_run_id=third["id"]))

        assert (first["previous_run_id"], second["previous_run_id"]) == (None, first["id"])
        assert [r["system_prompt"] for r in (first, second, third, fourth)] == [
            "Be brief.",
            "Be brief.",
            "Be long.",
            "Be long.",
        ]
        queued = (await json_events(client, second["id"]))["events"][0]
        assert queued["previous_run_id"] == first["id"]


async def test_a_follow_up_of_a_run_that_has_not_ended_is_409() -> None:
    async with api_client(settings()) as client:
        running = await create(client, hanging())
        response = await client.post("/runs", json=finishing(previous_run_id=running["id"]))
        error = error_of(response, 409, "run_not_ended")
        assert error["details"]["field"] == "previous_run_id"
        await cancel(client, running["id"])


async def test_a_follow_up_of_an_unknown_or_invisible_run_is_404() -> None:
    keys = [K1["Authorization"][7:], K2["Authorization"][7:]]
    async with api_client(settings(api_keys=keys)) as client:
        mine = await run_to_end(client, finishing(), K1)
        for previous, headers in ((UNKNOWN, K1), (mine["id"], K2)):
            response = await client.post(
                "/runs", json=finishing(previous_run_id=previous), headers=headers
            )
            error = error_of(response, 404, "not_found")
            assert error["details"]["field"] == "previous_run_id"


@pytest.mark.parametrize("previous", ["nope", "run_123", 5])
async def test_a_malformed_previous_run_id_is_422(previous: Any) -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json=finishing(previous_run_id=previous))
        error = error_of(response, 422, "validation_error")
        assert error["details"]["errors"][0]["field"] == "previous_run_id"


async def test_list_runs_by_previous_run_id_walks_a_conversation() -> None:
    async with api_client(settings()) as client:
        first = await run_to_end(client, finishing())
        a = await run_to_end(client, finishing(previous_run_id=first["id"]))
        b = await run_to_end(client, finishing(previous_run_id=first["id"]))
        await run_to_end(client, finishing(previous_run_id=a["id"]))

        listed = await client.get("/runs", params={"previous_run_id": first["id"]})
        assert [r["id"] for r in listed.json()["runs"]] == [b["id"], a["id"]]
        bad = await client.get("/runs", params={"previous_run_id": "x"})
        error_of(bad, 422, "validation_error")
