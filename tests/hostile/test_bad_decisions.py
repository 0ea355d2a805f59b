"""What a person sends a run is held to what a model and a new run's request are held to:
a value that could not be stored and read back (NaN, Infinity, `1e400`, a lone surrogate in
a value or a key, an integer past 64 bits) in a decision, its edited arguments or a steering
message, and edited arguments longer than a model's may be, are refused whole with a 422
naming them. Nothing is decided, and the run and its event log read back as before (the
unfixed service decided half, then answered 500 on the run's events for good). On the memory,
SQLite and Redis stores alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.kit import create, error_of, finish, scripted, settings, wait_ended
from tests.fakes.service import api_client

CALL = {"name": "calculator", "arguments": {"expression": "6*7"}, "id": "c1"}
WAITING = scripted(
    {"tool_calls": [CALL]}, finish("42"), tools=["calculator"], approval={"tools": ["calculator"]}
)
JSON = {"content-type": "application/json"}


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


async def waiting_run(client: httpx.AsyncClient) -> str:
    run = await create(client, WAITING)
    response = await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})
    assert response.json()["status"] == "requires_action", response.text
    return str(run["id"])


async def assert_untouched(client: httpx.AsyncClient, run_id: str) -> None:
    """Still waiting on its call, nothing decided, its event log readable both ways; then
    an ordinary approval ends it."""
    run = (await client.get(f"/runs/{run_id}")).json()
    assert [p["call_id"] for p in run["pending_approvals"]] == ["c1"], run
    page = await client.get(f"/runs/{run_id}/events", headers={"Accept": "application/json"})
    assert page.status_code == 200, page.text
    types = [e["type"] for e in page.json()["events"]]
    assert "approval.decided" not in types
    assert "user.message" not in types
    decided = await client.post(
        f"/runs/{run_id}/approvals", json={"decisions": [{"call_id": "c1", "approve": True}]}
    )
    assert decided.status_code == 202, decided.text
    assert (await wait_ended(client, run_id))["result"]["answer"] == "42"
    async with client.stream("GET", f"/runs/{run_id}/events") as stream:
        assert stream.status_code == 200
        await stream.aread()


def decision(**raw: str) -> str:
    """A body deciding c1 (approve), with fields whose values are raw JSON text."""
    fields = "".join(f', "{name}": {value}' for name, value in raw.items())
    return f'{{"decisions": [{{"call_id": "c1", "approve": true{fields}}}]}}'


@pytest.mark.parametrize(
    ("body", "where", "problem"),
    [
        (decision(arguments='{"expression": NaN}'), "arguments.expression", "finite"),
        (decision(arguments='{"expression": Infinity}'), "arguments.expression", "finite"),
        (decision(arguments='{"expression": -Infinity}'), "arguments.expression", "finite"),
        (decision(arguments='{"expression": 1e400}'), "arguments.expression", "finite"),
        (decision(arguments='{"expression": [1, 2e999]}'), "arguments.expression[1]", "finite"),
        (decision(arguments='{"expression": "1\\ud800"}'), "arguments.expression", "surrogate"),
        (decision(arguments='{"\\udfff": "1"}'), "decisions[0].arguments", "key"),
        (decision(arguments='{"e": {"\\ud800x": 1}}'), "arguments.e", "key"),
        (decision(arguments='{"n": 99999999999999999999}'), "arguments.n", "64-bit"),
        (decision(message='"no \\udc00"'), "decisions[0].message", "surrogate"),
    ],
)
async def test_a_decision_with_a_value_no_store_can_read_back_is_422_and_decides_nothing(
    store_url: str, body: str, where: str, problem: str
) -> None:
    async with api_client(settings(store_url=store_url)) as client:
        run_id = await waiting_run(client)

        response = await client.post(f"/runs/{run_id}/approvals", content=body, headers=JSON)

        error = error_of(response, 422, "validation_error")
        assert where in error["details"]["field"], error
        assert problem in error["message"], error
        await assert_untouched(client, run_id)


@pytest.mark.parametrize("content", ['"\\ud800"', '"steer \\udfff me"'])
async def test_a_steering_message_with_a_lone_surrogate_is_422(
    store_url: str, content: str
) -> None:
    async with api_client(settings(store_url=store_url)) as client:
        run_id = await waiting_run(client)

        response = await client.post(
            f"/runs/{run_id}/messages", content=f'{{"content": {content}}}', headers=JSON
        )

        error = error_of(response, 422, "validation_error")
        assert error["details"]["field"] == "content"
        assert "surrogate" in error["message"]
        await assert_untouched(client, run_id)


def edited(chars: int) -> dict[str, Any]:
    """Edited calculator arguments `chars` long as compact JSON."""
    prefix = len(json.dumps({"expression": ""}, separators=(",", ":")))
    return {"call_id": "c1", "approve": True, "arguments": {"expression": "1" * (chars - prefix)}}


async def test_edited_arguments_longer_than_a_models_may_be_are_422_naming_the_cap(
    store_url: str,
) -> None:
    async with api_client(settings(store_url=store_url)) as client:
        run_id = await waiting_run(client)

        response = await client.post(
            f"/runs/{run_id}/approvals", json={"decisions": [edited(900_000)]}
        )  # 900 KB: within the body cap; the unfixed service handed it to the tool

        error = error_of(response, 422, "validation_error")
        assert error["details"]["field"] == "decisions[0].arguments"
        assert error["details"]["cap"] == 100_000  # FINISHLINE_MAX_REPLY_CHARS's default
        assert "100,000" in error["message"]
        await assert_untouched(client, run_id)


async def test_the_cap_on_edited_arguments_is_the_models_and_applies_past_it_only() -> None:
    async with api_client(settings(max_reply_chars=1000)) as client:
        run_id = await waiting_run(client)
        over = await client.post(f"/runs/{run_id}/approvals", json={"decisions": [edited(1001)]})
        assert error_of(over, 422)["details"]["cap"] == 1000

        at = await client.post(f"/runs/{run_id}/approvals", json={"decisions": [edited(1000)]})

        assert at.status_code == 202, at.text  # then the tool's own schema has its say
        await wait_ended(client, run_id)
