"""Auth over the real server: a run belongs to the key that made it, and a browser follows it
with a run-scoped stream token, never with the API key in the URL."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.kit import assert_one_terminal_at_the_end, e2e_settings, follow, start_run
from tests.fakes.service import served_app

pytestmark = pytest.mark.e2e

KEY_A, KEY_B = "key-a-0123456789", "key-b-9876543210"
AS_A = {"Authorization": f"Bearer {KEY_A}"}
AS_B = {"Authorization": f"Bearer {KEY_B}"}


def scripted(answer: str, *, delay_s: float = 0) -> dict[str, Any]:
    """A scripted run that finishes with `answer`, after `delay_s` in its one LLM call."""
    finish = {"name": "task_finished", "arguments": {"answer": answer}}
    return {
        "task": f"say {answer}",
        "model": "scripted",
        "model_script": [{"tool_calls": [finish], "delay_s": delay_s}],
    }


async def test_a_run_is_invisible_to_another_key_and_to_no_key() -> None:
    async with served_app(e2e_settings(api_keys=[KEY_A, KEY_B])) as (_, client):
        run_id = await start_run(client, scripted("hi", delay_s=60), headers=AS_A)
        assert (await client.get(f"/runs/{run_id}", headers=AS_A)).json()["status"] == "running"

        for method, path in [
            ("GET", f"/runs/{run_id}"),
            ("GET", f"/runs/{run_id}/events"),
            ("GET", f"/runs/{run_id}/wait?timeout_s=0"),
            ("POST", f"/runs/{run_id}/cancel"),
            ("POST", f"/runs/{run_id}/stream-token"),
            ("DELETE", f"/runs/{run_id}"),
        ]:
            response = await client.request(method, path, headers=AS_B)
            assert response.status_code == 404, (method, path, response.text)
            assert response.json()["error"]["type"] == "not_found"
        events_json = await client.get(
            f"/runs/{run_id}/events", headers={**AS_B, "Accept": "application/json"}
        )
        assert events_json.status_code == 404
        assert (await client.get("/runs", headers=AS_B)).json()["runs"] == []
        assert [r["id"] for r in (await client.get("/runs", headers=AS_A)).json()["runs"]] == [
            run_id
        ]

        wrong = {"Authorization": "Bearer not-a-key"}
        for headers in ({}, wrong):
            for method, path in [
                ("GET", "/runs"),
                ("GET", f"/runs/{run_id}"),
                ("GET", f"/runs/{run_id}/events"),
                ("POST", f"/runs/{run_id}/cancel"),
            ]:
                response = await client.request(method, path, headers=headers)
                assert response.status_code == 401, (method, path, headers, response.text)
                assert response.headers["WWW-Authenticate"].startswith("Bearer")
        refused = await client.post("/runs", json=scripted("no key"))
        assert refused.status_code == 401
        assert (await client.get("/healthz")).status_code == 200

        # B's attempts changed nothing: A's run still goes on, and A can end it
        cancelled = await client.post(f"/runs/{run_id}/cancel", headers=AS_A)
        assert cancelled.status_code == 202
        assert cancelled.json()["status"] == "cancelled"
        assert_one_terminal_at_the_end(await follow(client, run_id, headers=AS_A), "run.cancelled")


async def test_a_stream_token_follows_its_own_run_without_any_header() -> None:
    async with served_app(e2e_settings(api_keys=[KEY_A, KEY_B])) as (_, client):
        run_id = await start_run(client, scripted("one"), headers=AS_A)
        other_id = await start_run(client, scripted("two"), headers=AS_A)

        issued = await client.post(f"/runs/{run_id}/stream-token", headers=AS_A)
        assert issued.status_code == 200, issued.text
        token = issued.json()["token"]
        assert KEY_A not in token

        # EventSource sends no headers: the events URL with the token is enough
        events = await follow(client, run_id, query=f"?token={token}")
        assert_one_terminal_at_the_end(events, "run.completed")
        assert {e.data["run_id"] for e in events} == {run_id}
        assert events[-1].data["result"]["answer"] == "one"
        assert issued.json()["events_url"] == f"/runs/{run_id}/events?token={token}"

        # the token opens nothing else: not another run's events, not the run itself
        for path in (f"/runs/{other_id}/events?token={token}", f"/runs/{run_id}?token={token}"):
            assert (await client.get(path)).status_code == 401, path
        # and an API key in the query string is no token
        for query in (f"token={KEY_A}", f"api_key={KEY_A}", f"access_token={KEY_A}"):
            response = await client.get(f"/runs/{run_id}/events?{query}")
            assert response.status_code == 401, query
