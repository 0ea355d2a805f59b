"""POST /runs/{id}/stream-token: a short-lived token for one run's events, for EventSource."""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from app.api.auth import StreamTokens, owner_of
from app.settings import Settings
from tests.api.kit import (
    TERMINAL_EVENTS,
    app_with_state,
    assert_sequential,
    error_of,
    finishing,
    run_to_end,
    settings,
    sse,
)
from tests.fakes.service import api_client

# keys long enough that a random token cannot contain one by chance
KEY1, KEY2 = "first-key-6f1d2c9a8b7e", "second-key-3a4b5c6d7e8f"
K1 = {"Authorization": f"Bearer {KEY1}"}
K2 = {"Authorization": f"Bearer {KEY2}"}
UNKNOWN = "run_00000000000000000000000000"


def keyed(**overrides: Any) -> Settings:
    return settings(api_keys=[KEY1, KEY2], **overrides)


async def test_token_follows_its_runs_events_without_an_authorization_header() -> None:
    async with api_client(keyed(stream_token_ttl_s=120)) as client:
        run = await run_to_end(client, finishing(), K1)
        before = int(time.time())

        response = await client.post(f"/runs/{run['id']}/stream-token", headers=K1)

        assert response.status_code == 200
        issued = response.json()
        assert before + 120 <= issued["expires_at"] <= int(time.time()) + 120
        assert issued["events_url"] == f"/runs/{run['id']}/events?token={issued['token']}"
        assert KEY1 not in issued["token"]
        events_response, events = await sse(client, "GET", issued["events_url"])
        assert events_response.status_code == 200
        assert_sequential(events)
        assert events[-1].event in TERMINAL_EVENTS
        page = await client.get(
            f"/runs/{run['id']}/events",
            params={"token": issued["token"]},
            headers={"Accept": "application/json"},
        )
        assert page.json()["done"] is True


async def test_token_does_not_open_another_runs_events() -> None:
    async with api_client(keyed()) as client:
        mine = await run_to_end(client, finishing(), K1)
        other = await run_to_end(client, finishing(), K1)
        token = (await client.post(f"/runs/{mine['id']}/stream-token", headers=K1)).json()["token"]

        response = await client.get(f"/runs/{other['id']}/events", params={"token": token})

        error_of(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"


async def test_token_opens_nothing_but_events() -> None:
    async with api_client(keyed()) as client:
        run = await run_to_end(client, finishing(), K1)
        token = (await client.post(f"/runs/{run['id']}/stream-token", headers=K1)).json()["token"]

        for method, url in [
            ("GET", f"/runs/{run['id']}"),
            ("GET", f"/runs/{run['id']}/wait"),
            ("DELETE", f"/runs/{run['id']}"),
            ("POST", f"/runs/{run['id']}/stream-token"),
        ]:
            response = await client.request(method, url, params={"token": token})
            error_of(response, 401, "unauthorized")


async def test_expired_token_is_401() -> None:
    async with app_with_state(keyed()) as (client, state):
        run = await run_to_end(client, finishing(), K1)
        owner_token = (await client.post(f"/runs/{run['id']}/stream-token", headers=K1)).json()
        assert owner_token["expires_at"]
        owner = owner_of(KEY1)
        tokens = state["tokens"]
        expired, expires = tokens.issue(run["id"], owner, now=time.time() - tokens.ttl_s - 5)
        assert expires < time.time()

        response = await client.get(f"/runs/{run['id']}/events", params={"token": expired})

        error = error_of(response, 401, "unauthorized")
        assert "expired" in error["message"]


@pytest.mark.parametrize(
    "forge",
    [
        lambda token: token[:-2] + ("AA" if not token.endswith("AA") else "BB"),
        lambda token: str(int(token.split(".")[0]) + 3600) + token[token.index(".") :],
        lambda token: "garbage",
        lambda token: "1.2.3",
        lambda token: "",
    ],
    ids=["signature", "expiry", "garbage", "wrong-parts", "empty"],
)
async def test_forged_token_is_401(forge: Callable[[str], str]) -> None:
    async with api_client(keyed()) as client:
        run = await run_to_end(client, finishing(), K1)
        token = (await client.post(f"/runs/{run['id']}/stream-token", headers=K1)).json()["token"]

        response = await client.get(
            f"/runs/{run['id']}/events",
            params={"token": forge(token)},
        )

        error_of(response, 401, "unauthorized")


async def test_stream_token_for_an_unknown_run_is_404() -> None:
    async with api_client(keyed()) as client:
        error_of(await client.post(f"/runs/{UNKNOWN}/stream-token", headers=K1), 404)


async def test_stream_token_for_another_keys_run_is_404() -> None:
    async with api_client(keyed()) as client:
        run = await run_to_end(client, finishing(), K1)
        error_of(await client.post(f"/runs/{run['id']}/stream-token", headers=K2), 404)


async def test_stream_token_without_auth_configured_is_issued_and_not_needed() -> None:
    async with api_client(settings()) as client:
        run = await run_to_end(client, finishing())

        response = await client.post(f"/runs/{run['id']}/stream-token")

        assert response.status_code == 200
        events_response, events = await sse(client, "GET", response.json()["events_url"])
        assert events_response.status_code == 200
        assert events[-1].event in TERMINAL_EVENTS


async def test_the_token_carries_no_digest_of_the_api_key() -> None:
    """The owner part is an HMAC with the server's secret: an unsalted hash of a weak key
    in a URL (or a log line) could be brute-forced back to the key."""
    async with app_with_state(keyed()) as (client, _):
        run = await run_to_end(client, finishing(), K1)

        token = (await client.post(f"/runs/{run['id']}/stream-token", headers=K1)).json()["token"]

        digest = hashlib.sha256(KEY1.encode()).hexdigest()
        assert owner_of(KEY1) not in token
        assert digest[:16] not in token
        assert digest[:16] not in base64.urlsafe_b64decode(token.split(".")[1] + "==").hex()
        another = StreamTokens(b"another secret").issue(run["id"], owner_of(KEY1), now=0)[0]
        assert another.split(".")[1] != token.split(".")[1]


async def test_a_token_names_its_runs_owner_so_it_cannot_serve_another_keys_run() -> None:
    async with app_with_state(keyed()) as (client, state):
        mine = await run_to_end(client, finishing(), K1)
        theirs = await run_to_end(client, finishing(), K2)
        tokens: StreamTokens = state["tokens"]

        forged, _ = tokens.issue(theirs["id"], owner_of(KEY1))
        response = await client.get(f"/runs/{theirs['id']}/events", params={"token": forged})

        error_of(response, 401, "unauthorized")
        good, _ = tokens.issue(mine["id"], owner_of(KEY1))
        assert (await client.get(f"/runs/{mine['id']}/events", params={"token": good})).is_success


async def test_a_token_for_an_unknown_run_is_401_like_any_bad_token() -> None:
    async with app_with_state(keyed()) as (client, state):
        token, _ = state["tokens"].issue(UNKNOWN, owner_of(KEY1))

        response = await client.get(f"/runs/{UNKNOWN}/events", params={"token": token})

        error_of(response, 401, "unauthorized")
