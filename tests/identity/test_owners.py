"""A token's owner is what an API key is (DESIGN §23): runs, idempotency keys, AG-UI threads,
approvals, stream tokens, quotas, usage, A2A tasks and webhooks go by it. With
FINISHLINE_OIDC_OWNER_CLAIM=org_id two users of one tenant share them and another tenant gets
404s; a token's owner never meets an API key's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx
import pytest
from a2a.types import GetTaskRequest, ListTasksRequest
from a2a.utils.errors import TaskNotFoundError

from app.identity.caller import owner_of, token_owner
from app.main import create_app
from tests.a2a.kit import TIMEOUT_S, A2AService, a2a_settings, send, text
from tests.a2a.kit import finish as a2a_finish
from tests.a2a.kit import scripted as a2a_scripted
from tests.agui.kit import agent_input, stream
from tests.agui.kit import scripted as agui_scripted
from tests.api.kit import _StateTap as StateTap
from tests.api.kit import (
    cancel,
    create,
    error_of,
    finish,
    finishing,
    hanging,
    run_to_end,
    scripted,
    sse,
    wait_ended,
)
from tests.e2e.kit import LocalEndpoints
from tests.fakes.oidc_issuer import AUDIENCE, FakeIssuer
from tests.fakes.serving import Served
from tests.identity.kit import KEY, bearer, keys_loaded, oidc_app, oidc_client

TENANT = {"oidc_owner_claim": "org_id"}


def people(issuer: FakeIssuer) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Alice and Bob of acme, Carol of globex."""
    return (
        bearer(issuer.token(sub="alice", org_id="acme")),
        bearer(issuer.token(sub="bob", org_id="acme", alg="ES256")),
        bearer(issuer.token(sub="carol", org_id="globex")),
    )


async def test_two_users_of_a_tenant_share_its_runs_and_another_tenant_gets_404s() -> None:
    async with FakeIssuer() as issuer, oidc_client(issuer, **TENANT) as client:
        alice, bob, carol = people(issuer)
        run = await run_to_end(client, finishing(), alice)
        rid = run["id"]
        bobs = await client.get(f"/runs/{rid}", headers=bob)
        bob_lists = (await client.get("/runs", headers=bob)).json()["runs"]
        bob_follows = await client.get(
            f"/runs/{rid}/events", headers={**bob, "Accept": "application/json"}
        )
        carols = {
            "get": await client.get(f"/runs/{rid}", headers=carol),
            "wait": await client.get(f"/runs/{rid}/wait", headers=carol),
            "cancel": await client.post(f"/runs/{rid}/cancel", headers=carol),
            "events": await client.get(f"/runs/{rid}/events", headers=carol),
            "stream-token": await client.post(f"/runs/{rid}/stream-token", headers=carol),
            "delete": await client.delete(f"/runs/{rid}", headers=carol),
        }
        carol_lists = (await client.get("/runs", headers=carol)).json()["runs"]
        bob_deletes = await client.delete(f"/runs/{rid}", headers=bob)

    assert bobs.status_code == 200
    assert [r["id"] for r in bob_lists] == [rid]
    assert bob_follows.status_code == 200
    for name, response in carols.items():
        assert response.status_code == 404, name
    assert carol_lists == []
    assert bob_deletes.status_code == 204


async def test_by_default_each_user_is_an_owner_of_their_own() -> None:
    async with FakeIssuer() as issuer, oidc_client(issuer) as client:
        alice, bob, _ = people(issuer)
        run = await run_to_end(client, finishing(), alice)
        hidden = await client.get(f"/runs/{run['id']}", headers=bob)

    error_of(hidden, 404, "not_found")


@pytest.mark.parametrize("sub", [KEY, owner_of(KEY)], ids=["the-key", "the-keys-owner"])
async def test_a_tokens_owner_never_meets_an_api_keys(sub: str) -> None:
    async with FakeIssuer() as issuer, oidc_client(issuer) as client:
        by_key = await run_to_end(client, finishing(), bearer(KEY))
        token = bearer(issuer.token(sub=sub))
        seen = await client.get(f"/runs/{by_key['id']}", headers=token)
        listed = (await client.get("/runs", headers=token)).json()["runs"]
        usage = (await client.get("/usage", headers=token)).json()

    error_of(seen, 404)
    assert listed == []
    assert usage["key_id"].startswith("oidc:")


async def test_idempotency_keys_are_the_tenants() -> None:
    async with FakeIssuer() as issuer, oidc_client(issuer, **TENANT) as client:
        alice, bob, carol = people(issuer)
        once = {"Idempotency-Key": "nightly-report"}
        first = await client.post("/runs", json=finishing(), headers={**alice, **once})
        again = await client.post("/runs", json=finishing(), headers={**bob, **once})
        other = await client.post("/runs", json=finishing(), headers={**carol, **once})

    assert (first.status_code, again.status_code, other.status_code) == (202, 200, 202)
    assert again.json()["id"] == first.json()["id"]
    assert other.json()["id"] != first.json()["id"]


async def test_an_ag_ui_thread_is_the_tenants() -> None:
    async with FakeIssuer() as issuer, oidc_client(issuer, **TENANT) as client:
        alice, bob, carol = people(issuer)
        turns = []
        for who, run in ((alice, "r1"), (bob, "r2"), (carol, "r3")):
            body = agent_input(run=run, finishline=agui_scripted(finish()))
            response, events = await stream(client, body, who)
            assert response.status_code == 200, response.text
            turns.append(events[0].data["metadata"]["finishline"]["run_id"])
        bobs_turn = (await client.get(f"/runs/{turns[1]}", headers=bob)).json()
        carols_turn = (await client.get(f"/runs/{turns[2]}", headers=carol)).json()

    assert bobs_turn["previous_run_id"] == turns[0]  # Bob went on with Alice's thread
    assert carols_turn["previous_run_id"] is None  # the same threadId: Carol's own


async def test_approvals_are_decided_within_the_tenant_only() -> None:
    call = {"name": "calculator", "arguments": {"expression": "6*7"}, "id": "c1"}
    body = scripted(
        {"tool_calls": [call]},
        finish("42"),
        tools=["calculator"],
        approval={"tools": ["calculator"]},
    )
    decision = {"decisions": [{"call_id": "c1", "approve": True}]}
    async with FakeIssuer() as issuer, oidc_client(issuer, **TENANT) as client:
        alice, bob, carol = people(issuer)
        run = await create(client, body, alice)
        waiting = await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10}, headers=bob)
        by_carol = await client.post(f"/runs/{run['id']}/approvals", json=decision, headers=carol)
        by_bob = await client.post(f"/runs/{run['id']}/approvals", json=decision, headers=bob)
        ended = await wait_ended(client, run["id"], alice)

    assert waiting.json()["status"] == "requires_action"
    error_of(by_carol, 404)
    assert by_bob.status_code == 202, by_bob.text
    assert ended["result"]["answer"] == "42"


async def test_a_stream_token_stands_for_the_tenant_and_reads_only() -> None:
    async with FakeIssuer() as issuer, oidc_app(issuer, **TENANT) as (client, state):
        alice, bob, carol = people(issuer)
        run = await run_to_end(client, finishing(), alice)
        token = (await client.post(f"/runs/{run['id']}/stream-token", headers=bob)).json()
        events_url = f"/runs/{run['id']}/events"
        response, events = await sse(client, "GET", events_url, params={"token": token["token"]})
        refused_write = await client.post(
            f"/runs/{run['id']}/cancel", params={"token": token["token"]}
        )
        carol_owner = token_owner(issuer.issuer, "org_id", "globex")
        forged, _ = state["tokens"].issue(run["id"], carol_owner)
        refused = await client.get(events_url, params={"token": forged})
        assert carol  # Carol's own token gets a 404 (the tenant test), her stream token a 401

    assert response.status_code == 200
    assert events[-1].event == "run.completed"
    error_of(refused, 401)
    error_of(refused_write, 401)  # a stream token is no bearer credential


async def test_quotas_and_usage_are_the_tenants() -> None:
    async with (
        FakeIssuer() as issuer,
        oidc_client(issuer, quota_concurrent_runs=1, **TENANT) as client,
    ):
        alice, bob, carol = people(issuer)
        busy = await create(client, hanging(), alice)
        bob_refused = await client.post("/runs", json=finishing(), headers=bob)
        carols = await run_to_end(client, finishing(), carol)
        await cancel(client, busy["id"], alice)
        await wait_ended(client, busy["id"], alice)
        alices_usage = (await client.get("/usage", headers=alice)).json()
        bobs_usage = (await client.get("/usage", headers=bob)).json()
        carols_usage = (await client.get("/usage", headers=carol)).json()

    error = error_of(bob_refused, 429, "quota_exceeded")
    assert error["details"]["quota"] == "concurrent_runs"
    assert carols["status"] == "completed"
    assert alices_usage == bobs_usage
    assert alices_usage["runs"] == 1
    assert carols_usage["runs"] == 1
    assert alices_usage["key_id"] != carols_usage["key_id"]


@asynccontextmanager
async def a2a_oidc_service(issuer: FakeIssuer) -> AsyncIterator[A2AService]:
    """`a2a_service` trusting `issuer`, once its keys are loaded."""
    config = a2a_settings(oidc_issuer=issuer.issuer, oidc_audience=AUDIENCE, **TENANT)
    tap = StateTap(create_app(config))
    async with AsyncExitStack() as stack:
        server = await stack.enter_async_context(Served(tap, lifespan="on"))
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=TIMEOUT_S))
        await keys_loaded(tap.state)
        yield A2AService(server, http, stack)


async def test_a2a_tasks_are_the_tenants() -> None:
    async with FakeIssuer() as issuer, a2a_oidc_service(issuer) as service:
        alice = await service.client(
            "calc", key=issuer.token(sub="a", org_id="acme"), streaming=False
        )
        bob = await service.client("calc", key=issuer.token(sub="b", org_id="acme"))
        carol = await service.client("calc", key=issuer.token(sub="c", org_id="globex"))
        task = await send(alice, text("2+3?"), finishline=a2a_scripted(a2a_finish("5")))
        seen_by_bob = await bob.get_task(GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await carol.get_task(GetTaskRequest(id=task.id))
        carols_list = await carol.list_tasks(ListTasksRequest())

    assert seen_by_bob.id == task.id
    assert list(carols_list.tasks) == []


async def test_a_tokens_run_delivers_its_webhook_which_carries_no_credential() -> None:
    async with (
        FakeIssuer() as issuer,
        LocalEndpoints() as receiver,
        oidc_client(issuer, http_tool_allow_hosts=["127.0.0.1"], **TENANT) as client,
    ):
        raw = issuer.token(sub="alice", org_id="acme")
        body = finishing("42", webhook=receiver.url("/hook/tenant"))
        run = await run_to_end(client, body, bearer(raw))
        await receiver.wait_for_hooks("tenant", 1)

    (hook,) = receiver.hooks["tenant"]
    assert hook["id"] == run["id"]
    assert hook["result"]["answer"] == "42"
    sent = str(hook)
    assert raw.split(".")[1] not in sent
    assert "oidc:" not in sent
