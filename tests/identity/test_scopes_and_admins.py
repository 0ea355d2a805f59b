"""Scopes (DESIGN §23): a token that carries any `finishline:` scope is held to them
(`finishline:read`: GETs and streams; `finishline:write`: the rest; 403 `insufficient_scope`
otherwise); a token with none, and every API key, may do both. Admins: FINISHLINE_ADMIN_KEYS
and a token holding FINISHLINE_OIDC_ADMIN_CLAIM's value are `Caller.admin`."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.identity.caller import Access
from tests.agui.kit import agent_input
from tests.agui.kit import scripted as agui_scripted
from tests.api.kit import create, error_of, finish, finishing, run_to_end, sse
from tests.fakes.oidc_issuer import FakeIssuer
from tests.identity.kit import KEY, bearer, oidc_app, oidc_client

READ, WRITE = "finishline:read", "finishline:write"


def lacks(response: httpx.Response, scope: str) -> None:
    error = error_of(response, 403, "insufficient_scope")
    assert error["details"] == {"scope": scope}
    assert response.headers["www-authenticate"] == (
        f'Bearer error="insufficient_scope", scope="{scope}"'
    )


async def test_a_read_token_reads_and_follows_but_writes_nothing() -> None:
    async with FakeIssuer() as issuer, oidc_client(issuer) as client:
        writer = bearer(issuer.token(scope=f"openid {READ} {WRITE}"))
        reader = bearer(issuer.token(scope=f"openid profile {READ}"))
        run = await run_to_end(client, finishing(), writer)
        rid = run["id"]
        reads = [
            await client.get("/runs", headers=reader),
            await client.get(f"/runs/{rid}", headers=reader),
            await client.get(f"/runs/{rid}/wait", headers=reader),
            await client.get("/usage", headers=reader),
            await client.get("/tools", headers=reader),
        ]
        streamed, events = await sse(client, "GET", f"/runs/{rid}/events", headers=reader)
        token = await client.post(f"/runs/{rid}/stream-token", headers=reader)
        writes = [
            await client.post("/runs", json=finishing(), headers=reader),
            await client.post(f"/runs/{rid}/cancel", headers=reader),
            await client.post(f"/runs/{rid}/messages", json={"content": "hi"}, headers=reader),
            await client.delete(f"/runs/{rid}", headers=reader),
            await client.post(
                "/ag-ui", json=agent_input(finishline=agui_scripted(finish())), headers=reader
            ),
        ]

    assert [r.status_code for r in reads] == [200] * len(reads)
    assert streamed.status_code == 200
    assert events[-1].event == "run.completed"
    assert token.status_code == 200
    for response in writes:
        lacks(response, WRITE)


async def test_a_write_token_writes_but_does_not_read() -> None:
    async with FakeIssuer() as issuer, oidc_client(issuer) as client:
        writer = bearer(issuer.token(scope=WRITE))
        run = await create(client, finishing(), writer)
        read = await client.get(f"/runs/{run['id']}", headers=writer)

    lacks(read, READ)


@pytest.mark.parametrize(
    "claims",
    [{"scope": "openid profile email"}, {}, {"scp": ["openid"]}],
    ids=["other-scopes", "no-scope", "scp-without-ours"],
)
async def test_a_token_without_finishline_scopes_may_read_and_write(
    claims: dict[str, Any],
) -> None:
    async with FakeIssuer() as issuer, oidc_client(issuer) as client:
        token = bearer(issuer.token(**claims))
        run = await run_to_end(client, finishing(), token)
        assert (await client.delete(f"/runs/{run['id']}", headers=token)).status_code == 204


@pytest.mark.parametrize(
    ("claims", "may"),
    [
        ({"scp": [READ]}, {Access.READ}),  # Okta and Entra: a list
        ({"scp": f"{READ} {WRITE}"}, {Access.READ, Access.WRITE}),
        ({"scope": "finishline:admin"}, set()),  # ours, neither: nothing
    ],
)
async def test_scopes_are_read_from_scope_or_scp(claims: dict[str, Any], may: set[Access]) -> None:
    async with FakeIssuer() as issuer, oidc_app(issuer) as (_, state):
        caller = await state["authenticator"].caller(f"Bearer {issuer.token(**claims)}")

    assert caller.grants == may


async def test_an_a2a_read_token_may_get_tasks_but_not_send() -> None:
    async with FakeIssuer() as issuer:
        from tests.a2a.kit import AGENTS

        async with oidc_client(issuer, agents=AGENTS) as client:
            reader = bearer(issuer.token(scope=READ))
            rpc = {"jsonrpc": "2.0", "id": 1, "params": {}}
            send = await client.post(
                "/a2a/calc",
                json={**rpc, "method": "SendMessage", "params": {"message": {}}},
                headers={**reader, "A2A-Version": "1.0"},
            )
            get = await client.post(
                "/a2a/calc",
                json={**rpc, "method": "GetTask", "params": {"id": "nope"}},
                headers={**reader, "A2A-Version": "1.0"},
            )
            legacy_send = await client.post(
                "/a2a/calc", json={**rpc, "method": "message/send"}, headers=reader
            )

    lacks(send, WRITE)
    lacks(legacy_send, WRITE)
    assert get.status_code == 200  # past auth: the JSON-RPC answer says the task is unknown
    assert "error" in get.json()


async def test_an_a2a_write_token_may_send_but_not_get_tasks() -> None:
    async with FakeIssuer() as issuer:
        from tests.a2a.kit import AGENTS

        async with oidc_client(issuer, agents=AGENTS) as client:
            writer = {**bearer(issuer.token(scope=WRITE)), "A2A-Version": "1.0"}
            rpc = {"jsonrpc": "2.0", "id": 1}
            send = await client.post(
                "/a2a/calc", json={**rpc, "method": "SendMessage", "params": {}}, headers=writer
            )
            get = await client.post(
                "/a2a/calc",
                json={**rpc, "method": "GetTask", "params": {"id": "x"}},
                headers=writer,
            )

    assert send.status_code == 200  # past auth: the JSON-RPC answer says the params are bad
    lacks(get, READ)


async def test_admin_keys_and_admin_claims_make_admin_callers() -> None:
    config = {"admin_keys": ["the-admin-key"], "oidc_admin_claim": "roles"}
    config["oidc_admin_value"] = "finishline-admin"
    async with FakeIssuer() as issuer, oidc_app(issuer, **config) as (client, state):
        authenticate = state["authenticator"].caller
        admin_key = await authenticate("Bearer the-admin-key")
        plain_key = await authenticate(f"Bearer {KEY}")
        in_list = await authenticate(f"Bearer {issuer.token(roles=['x', 'finishline-admin'])}")
        as_text = await authenticate(f"Bearer {issuer.token(roles='finishline-admin')}")
        other = await authenticate(f"Bearer {issuer.token(roles=['finishline-user'])}")
        admins_run = await run_to_end(client, finishing(), bearer("the-admin-key"))
        hidden = await client.get(f"/runs/{admins_run['id']}", headers=bearer(KEY))

    assert (admin_key.admin, plain_key.admin) == (True, False)
    assert (in_list.admin, as_text.admin, other.admin) == (True, True, False)
    assert admins_run["status"] == "completed"
    error_of(hidden, 404)  # an admin is an owner like any other for runs
