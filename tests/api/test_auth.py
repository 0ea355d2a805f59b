"""FINISHLINE_API_KEYS: bearer keys on every endpoint with run content or server details,
and each run visible only to the key that made it."""

from __future__ import annotations

import hmac
import json
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from starlette.routing import Route

from app.api import auth
from app.api.openapi import BEARER_SCHEME
from app.main import create_app
from app.settings import Settings
from tests.api.kit import (
    cancel,
    create,
    error_of,
    finishing,
    hanging,
    run_to_end,
    settings,
)
from tests.fakes.service import api_client

K1 = {"Authorization": "Bearer k1"}
K2 = {"Authorization": "Bearer k2"}
RUN = "run_00000000000000000000000000"

PROTECTED = [
    ("POST", "/runs"),
    ("GET", "/runs"),
    ("GET", f"/runs/{RUN}"),
    ("GET", f"/runs/{RUN}/events"),
    ("POST", f"/runs/{RUN}/cancel"),
    ("GET", f"/runs/{RUN}/wait"),
    ("DELETE", f"/runs/{RUN}"),
    ("POST", f"/runs/{RUN}/stream-token"),
    ("GET", "/tools"),
    ("GET", "/settings"),
    ("GET", "/agents"),
    ("GET", "/agents/researcher"),
]


def keyed() -> Settings:
    return settings(api_keys=["k1", "k2"])


async def send(
    client: httpx.AsyncClient, method: str, url: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    body = finishing() if method == "POST" and url == "/runs" else None
    return await client.request(method, url, json=body, headers=headers)


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer nope", "Bearer ", "k1", "Basic azE6", "Bearer k1k2"],
    ids=["missing", "bad-key", "empty-key", "no-scheme", "basic", "glued-keys"],
)
async def test_protected_endpoints_are_401_with_a_challenge_without_a_valid_key(
    authorization: str | None,
) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    async with api_client(keyed()) as client:
        for method, url in PROTECTED:
            response = await send(client, method, url, headers)

            assert response.status_code == 401, (method, url, response.text)
            error_of(response, 401, "unauthorized")
            assert response.headers["www-authenticate"] == "Bearer", (method, url)


@pytest.mark.parametrize("key", ["k1", "k2"])
async def test_each_configured_key_is_accepted(key: str) -> None:
    async with api_client(keyed()) as client:
        headers = {"Authorization": f"Bearer {key}"}
        run = await run_to_end(client, finishing(), headers)
        assert run["status"] == "completed"


async def test_bearer_scheme_is_case_insensitive() -> None:
    async with api_client(keyed()) as client:
        assert (
            await client.get("/runs", headers={"Authorization": "bearer k1"})
        ).status_code == 200


OPEN = ["/healthz", "/readyz", "/metrics", "/", "/openapi.json", "/docs", "/redoc"]
"""What the API reference's "Auth" (docs/reference/api.md) lists as open: health, metrics, the
viewer page, the API schema and its docs pages (docs/decisions.md: the schema holds no run and
no secret)."""


@pytest.mark.parametrize("url", [*OPEN, "/static/index.html", "/docs/oauth2-redirect"])
async def test_health_metrics_the_viewer_and_the_api_docs_are_open_without_a_key(
    url: str,
) -> None:
    async with api_client(keyed()) as client:
        assert (await client.get(url)).status_code == 200


async def test_every_other_operation_needs_a_key() -> None:
    """Each operation of the API's schema, and the docs routes FastAPI adds, walked: the open
    ones above answer, every other is 401, so a new route is protected unless it is added to
    the reference's list (and OPEN) on purpose."""
    app = create_app(keyed())
    operations = [
        (method.upper(), path) for path, item in app.openapi()["paths"].items() for method in item
    ]
    operations += [
        (method, r.path)
        for r in app.routes
        if isinstance(r, Route)
        for method in sorted((r.methods or set()) - {"HEAD"})
    ]
    async with (
        LifespanManager(app) as manager,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=manager.app), base_url="http://test"
        ) as client,
    ):
        for method, path in operations:
            url = path.replace("{run_id}", RUN)
            body = finishing() if method == "POST" else None
            response = await client.request(method, url, json=body)

            if path.endswith("/.well-known/agent-card.json"):  # A2A cards are public (§17)
                assert response.status_code == 404, (method, url, response.text)  # no profile
                continue
            expected = 200 if path in OPEN or path.startswith("/docs") else 401
            assert response.status_code == expected, (method, url, response.text)
    assert len(operations) > 15
    assert {path for _, path in operations} >= set(OPEN) - {"/"}


def without_security(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` less what says that auth is on: the bearer scheme and each operation's
    requirement of it."""
    schema["components"].pop("securitySchemes", None)
    for item in schema["paths"].values():
        for operation in item.values():
            operation.pop("security", None)
    return schema


async def test_the_open_api_schema_is_the_same_with_keys_and_carries_no_secret() -> None:
    """Kept open with keys set, as FastAPI and LangGraph's server do: it describes the API
    and this server's caps, never a key, a secret, a host or a model this server is set with.
    With keys it says only that, besides: the bearer scheme, required where a key is."""
    secrets = ["key-9b1e", "token-secret-77c4", "sk-llm-a1b2", "hosts.internal.test"]
    secrets += ["llm.internal.test", "model-internal-x"]
    deployment = {
        "token_secret": secrets[1],
        "llm_api_key": secrets[2],
        "http_tool_allow_hosts": [secrets[3]],
        "llm_base_url": f"http://{secrets[4]}/v1",
        "default_model": secrets[5],
    }
    async with api_client(settings(api_keys=[secrets[0]], **deployment)) as client:
        keyed_schema = (await client.get("/openapi.json")).text
    async with api_client(settings(**deployment)) as client:
        open_schema = (await client.get("/openapi.json")).text

    keyed, unkeyed = json.loads(keyed_schema), json.loads(open_schema)
    assert keyed["components"]["securitySchemes"] == {"bearer": BEARER_SCHEME}
    secured = {
        (method, path)
        for path, item in keyed["paths"].items()
        for method, operation in item.items()
        if operation.get("security") == [{"bearer": []}]
    }
    assert ("post", "/runs") in secured
    assert ("get", "/usage") in secured
    assert ("get", "/healthz") not in secured
    assert "securitySchemes" not in unkeyed["components"]
    assert "security" not in json.dumps(unkeyed["paths"])
    assert without_security(keyed) == unkeyed
    assert [s for s in secrets if s in keyed_schema] == []


async def test_the_schema_declares_the_bearer_scheme_not_an_authorization_parameter() -> None:
    """OpenAPI ignores a header parameter named Authorization: the scheme says it instead."""
    schema = create_app(keyed()).openapi()
    parameters = [
        p["name"].lower()
        for item in schema["paths"].values()
        for operation in item.values()
        for p in operation.get("parameters", [])
    ]
    assert "authorization" not in parameters
    secured = [op for item in schema["paths"].values() for op in item.values() if "security" in op]
    assert secured
    assert all("401" in op["responses"] for op in secured)


async def test_a_run_is_invisible_to_another_key() -> None:
    async with api_client(keyed()) as client:
        mine = await run_to_end(client, finishing(), K1)
        rid = mine["id"]

        error_of(await client.get(f"/runs/{rid}", headers=K2), 404, "not_found")
        error_of(await client.get(f"/runs/{rid}/wait", headers=K2), 404)
        error_of(await client.post(f"/runs/{rid}/cancel", headers=K2), 404)
        error_of(await client.delete(f"/runs/{rid}", headers=K2), 404)
        error_of(await client.post(f"/runs/{rid}/stream-token", headers=K2), 404)
        error_of(
            await client.get(f"/runs/{rid}/events", headers={**K2, "Accept": "application/json"}),
            404,
        )
        error_of(await client.get(f"/runs/{rid}/events", headers=K2), 404)
        assert (await client.get(f"/runs/{rid}", headers=K1)).status_code == 200


async def test_cancel_by_another_key_is_404_and_leaves_the_run_running() -> None:
    async with api_client(keyed()) as client:
        run = await create(client, hanging(), K1)

        error_of(await client.post(f"/runs/{run['id']}/cancel", headers=K2), 404)

        assert (await client.get(f"/runs/{run['id']}", headers=K1)).json()["status"] in (
            "queued",
            "running",
        )
        await cancel(client, run["id"], K1)


async def test_list_shows_each_key_only_its_own_runs() -> None:
    async with api_client(keyed()) as client:
        a = [(await create(client, finishing(), K1))["id"] for _ in range(3)]
        b = [(await create(client, finishing(), K2))["id"] for _ in range(2)]

        listed_1 = (await client.get("/runs", headers=K1)).json()["runs"]
        listed_2 = (await client.get("/runs", headers=K2)).json()["runs"]

        assert [r["id"] for r in listed_1] == a[::-1]
        assert [r["id"] for r in listed_2] == b[::-1]


async def test_idempotency_keys_belong_to_each_api_key() -> None:
    async with api_client(keyed()) as client:
        same = {"Idempotency-Key": "job-1"}
        first = await client.post("/runs", json=finishing(), headers={**K1, **same})
        second = await client.post("/runs", json=finishing(), headers={**K2, **same})
        other_body = await client.post("/runs", json=finishing("x"), headers={**K2, **same})

        assert (first.status_code, second.status_code) == (202, 202)
        assert first.json()["id"] != second.json()["id"]
        error_of(other_body, 409, "idempotency_conflict")


@pytest.mark.parametrize("key", ["k2", "wrong", "k"])
async def test_api_keys_are_compared_in_constant_time_each_against_every_key(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Digests of equal length, each compared with hmac.compare_digest, all of them whatever
    matches: how long a check takes tells nothing about the keys."""
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counting)
    async with api_client(settings(api_keys=["k1", "k2", "k3"])) as client:
        response = await client.get("/runs", headers={"Authorization": f"Bearer {key}"})

        assert response.status_code == (200 if key == "k2" else 401)
        assert len(compared) == 3
        assert {len(a) for a, _ in compared} == {32}
        assert {len(b) for _, b in compared} == {32}
