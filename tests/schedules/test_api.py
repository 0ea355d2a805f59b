"""The /schedules resource (DESIGN §21) over HTTP: made, read, listed, changed, deleted and
triggered per API key; every field checked, named, before anything is stored, the run body as
POST /runs checks its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.kit import error_of, finishing, settings, wait_ended
from tests.fakes.service import api_client

K1 = {"Authorization": "Bearer first-key-4b1e"}
K2 = {"Authorization": "Bearer second-key-9c7d"}
# once a year: the app's own scheduler (on the real clock) never fires it during a test
DAILY = {"cron": "0 9 1 1 *", "timezone": "Europe/Paris", "run": finishing("daily")}


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param in ("redis", "postgres"):
        url: str = request.getfixturevalue(f"{request.param}_url")
        return url
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


def keyed(store_url: str, **overrides: Any) -> Any:
    keys = [K1["Authorization"][7:], K2["Authorization"][7:]]
    return settings(store_url=store_url, api_keys=keys, **overrides)


async def made(client: httpx.AsyncClient, body: dict[str, Any], headers: Any = K1) -> Any:
    response = await client.post("/schedules", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


async def test_a_schedule_is_made_read_listed_changed_and_deleted_per_key(store_url: str) -> None:
    async with api_client(keyed(store_url)) as client:
        schedule = await made(client, DAILY)
        assert schedule["cron"] == "0 9 1 1 *"
        assert schedule["timezone"] == "Europe/Paris"
        assert (schedule["overlap"], schedule["misfire"], schedule["enabled"]) == (
            "skip",
            "run_once",
            True,
        )
        assert schedule["next_due_at"].endswith(("07:00:00Z", "08:00:00Z"))  # 09:00 in Paris
        sid = schedule["id"]
        assert (await client.get(f"/schedules/{sid}", headers=K1)).json() == schedule
        error_of(await client.get(f"/schedules/{sid}", headers=K2), 404)
        listed = (await client.get("/schedules", headers=K1)).json()
        assert [s["id"] for s in listed["schedules"]] == [sid]
        assert (await client.get("/schedules", headers=K2)).json()["schedules"] == []
        changed = await client.patch(
            f"/schedules/{sid}", json={"enabled": False, "metadata": {"team": "ops"}}, headers=K1
        )
        assert changed.status_code == 200, changed.text
        assert changed.json()["next_due_at"] is None
        assert changed.json()["metadata"] == {"team": "ops"}
        error_of(await client.delete(f"/schedules/{sid}", headers=K2), 404)
        assert (await client.delete(f"/schedules/{sid}", headers=K1)).status_code == 204
        error_of(await client.get(f"/schedules/{sid}", headers=K1), 404)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "0 0 31 2 *"}, "cron"),
        ({"cron": "@fortnightly"}, "cron"),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
        ({"run": {"task": "x", "tools": ["no_such_tool"]}}, "run.tools"),
        ({"run": {"task": "x", "settings": {"max_steps": 10**6}}}, "run.settings.max_steps"),
        ({"run": {"task": "x", "unknown": 1}}, "run.unknown"),
        ({"run": {"model": "scripted"}}, "run.task"),
        ({"run": {"task": "x", "stream": True}}, "run.stream"),
        ({"run": {"task": "x", "thread_id": "ag-ui:t"}}, "run.thread_id"),
        ({"starts_at": "2030-01-02T00:00:00Z", "ends_at": "2030-01-01T00:00:00Z"}, "ends_at"),
        ({"overlap": "sometimes"}, "overlap"),
        ({"starts_at": "2030-01-02T00:00:00"}, "starts_at"),
    ],
)
async def test_every_field_is_checked_and_named_before_anything_is_stored(
    change: dict[str, Any], field: str
) -> None:
    async with api_client(settings()) as client:
        error = error_of(await client.post("/schedules", json={**DAILY, **change}), 422)
        named = [error["details"].get("field")] + [
            e["field"] for e in error["details"].get("errors", [])
        ]
        assert field in named, error
        assert (await client.get("/schedules")).json()["schedules"] == []
        schedule = await made(client, DAILY, headers=None)
        patched = await client.patch(f"/schedules/{schedule['id']}", json=change)
        error_of(patched, 422)
        assert (await client.get(f"/schedules/{schedule['id']}")).json() == schedule


async def test_a_trigger_fires_now_and_the_run_carries_the_schedule(store_url: str) -> None:
    async with api_client(keyed(store_url)) as client:
        sid = (await made(client, DAILY))["id"]
        error_of(await client.post(f"/schedules/{sid}/trigger", headers=K2), 404)
        firing = (await client.post(f"/schedules/{sid}/trigger", headers=K1)).json()
        assert (firing["outcome"], firing["manual"], firing["attempt"]) == ("fired", True, 1)
        run = await wait_ended(client, firing["run_id"], headers=K1)
        assert run["schedule_id"] == sid
        assert run["result"]["answer"] == "daily"
        firings = (await client.get(f"/schedules/{sid}/firings", headers=K1)).json()
        assert [f["run_id"] for f in firings["firings"]] == [firing["run_id"]]
        error_of(await client.get(f"/schedules/{sid}/firings", headers=K2), 404)


async def test_a_patch_may_clear_the_window_but_no_other_field() -> None:
    async with api_client(settings()) as client:
        sid = (await made(client, {**DAILY, "ends_at": "2040-01-01T00:00:00Z"}, headers=None))["id"]
        for field in ("cron", "run", "enabled", "timezone", "overlap"):
            error = error_of(await client.patch(f"/schedules/{sid}", json={field: None}), 422)
            assert field in error["message"], error
        cleared = await client.patch(f"/schedules/{sid}", json={"ends_at": None})
        assert cleared.json()["ends_at"] is None
        error_of(await client.get(f"/schedules/{sid}/firings?before=nan"), 422)


async def test_with_schedules_disabled_a_trigger_is_recorded_and_starts_nothing() -> None:
    async with api_client(settings(schedules_enabled=False)) as client:
        sid = (await made(client, DAILY, headers=None))["id"]
        firing = (await client.post(f"/schedules/{sid}/trigger")).json()
        assert (firing["outcome"], firing["run_id"]) == ("disabled", None)
        assert (await client.get("/runs")).json()["runs"] == []


@pytest.mark.parametrize(
    "raw",
    [
        b'{"cron": "@daily", "run": {"task": "x"}, "metadata": {"k": "\\ud800"}}',
        b'{"cron": "@daily", "run": {"task": "x"}, "metadata": {"k": 1e400}}',
        b'{"cron": "@daily", "run": {"task": "x"}, "metadata": ' + b"[" * 200 + b"]" * 200 + b"}",
    ],
)
async def test_values_no_store_can_keep_are_refused_with_a_422(raw: bytes) -> None:
    async with api_client(settings()) as client:
        response = await client.post(
            "/schedules", content=raw, headers={"Content-Type": "application/json"}
        )
        error_of(response, 422)
        assert (await client.get("/schedules")).json()["schedules"] == []
