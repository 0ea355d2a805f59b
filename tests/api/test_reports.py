"""GET /reports/termination (DESIGN §20) on every store: exact against GET /runs for the same
filter, per key, group_by=key for admins only, and bad input refused by name."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.kit import cancel, create, finishing, hanging, run_to_end, scripted, settings
from tests.api.kit import finish as finish_reply
from tests.fakes.service import api_client

KEY_A, KEY_B, ADMIN = "key-a-" + "a" * 20, "key-b-" + "b" * 20, "admin-" + "c" * 20
A = {"Authorization": f"Bearer {KEY_A}"}
B = {"Authorization": f"Bearer {KEY_B}"}
AD = {"Authorization": f"Bearer {ADMIN}"}
ENDED = "completed,incomplete,failed,cancelled"


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param in ("redis", "postgres"):
        url: str = request.getfixturevalue(f"{request.param}_url")
        return url
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


async def listed(client: httpx.AsyncClient, headers: dict[str, str], **params: Any) -> list[dict]:
    response = await client.get(
        "/runs", params={"status": ENDED, "limit": 200, **params}, headers=headers
    )
    assert response.status_code == 200, response.text
    return list(response.json()["runs"])


async def report(client: httpx.AsyncClient, headers: dict[str, str], **params: Any) -> dict:
    response = await client.get("/reports/termination", params=params, headers=headers)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def a_mix_of_runs(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    """Runs that end finished, answered, max_steps, nudge_limit, error and cancelled."""
    await run_to_end(client, finishing("42"), headers)
    await run_to_end(client, scripted({"content": "4"}, settings={"stop_tool": False}), headers)
    plain = {"content": "still thinking"}
    limits = {"max_steps": 1, "max_nudges": 5}
    await run_to_end(client, scripted(plain, plain, settings=limits), headers)
    await run_to_end(client, scripted(plain, plain, settings={"max_nudges": 1}), headers)
    await run_to_end(client, scripted(), headers)  # the script runs out: an error
    await run_to_end(client, {"task": "say hi", "model": "demo"}, headers)
    run = await create(client, hanging(), headers)
    await cancel(client, run["id"], headers)
    await run_to_end(client, {"task": "x", "model": "scripted"} | {"model_script": []}, headers)


async def test_the_report_counts_exactly_the_runs_get_runs_lists(store_url: str) -> None:
    config = settings(store_url=store_url, api_keys=[KEY_A, KEY_B], admin_keys=[ADMIN])
    async with api_client(config) as client:
        await a_mix_of_runs(client, A)
        await run_to_end(client, finishing("b's"), B)
        runs = await listed(client, A)
        assert len(runs) >= 8
        got = await report(client, A)
        assert got["runs"] == len(runs)
        assert got["all_keys"] is False
        for group in got["groups"]:
            mine = [r for r in runs if r["model"] == group["group"]]
            assert group["runs"] == len(mine) == len(await listed(client, A, model=group["group"]))
            reasons = Counter(r["result"]["reason"] for r in mine if r.get("result"))
            assert {k: v for k, v in group["by_reason"].items() if v} == dict(reasons)
            statuses = Counter(r["status"] for r in mine)
            assert {k: v for k, v in group["by_status"].items() if v} == dict(statuses)
        newest = runs[0]["created_at"]
        since = await report(client, A, since=newest)
        assert since["runs"] == len(await listed(client, A, since=newest)) == 1
        until = await report(client, A, until=newest)
        assert until["runs"] == len(await listed(client, A, until=newest)) == len(runs) - 1
        by_day = await report(client, A, group_by="day")
        assert sum(g["runs"] for g in by_day["groups"]) == len(runs)

        assert (await report(client, B))["runs"] == 1  # a key sees its own runs
        admin = await report(client, AD, group_by="key")
        assert admin["all_keys"] is True
        assert admin["runs"] == len(runs) + 1
        assert sorted(g["runs"] for g in admin["groups"]) == [1, len(runs)]


async def test_group_by_key_is_for_admin_keys_only() -> None:
    async with api_client(settings(api_keys=[KEY_A], admin_keys=[ADMIN])) as client:
        response = await client.get("/reports/termination?group_by=key", headers=A)
        assert response.status_code == 403, response.text
        assert "admin" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("group_by=week", "group_by"),
        ("since=yesterday", "since"),
        ("until=0.5", "until"),
        ("since=2026-02-30", "since"),
        ("since=2026-03-02&until=2026-03-01", "until"),
    ],
)
async def test_bad_report_queries_are_422_naming_the_field(query: str, field: str) -> None:
    async with api_client(settings()) as client:
        response = await client.get(f"/reports/termination?{query}")
        assert response.status_code == 422, response.text
        assert field in response.text


async def test_compare_puts_runs_side_by_side_with_their_steps_aligned(store_url: str) -> None:
    calc = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}
    config = settings(store_url=store_url, api_keys=[KEY_A, KEY_B])
    async with api_client(config) as client:
        two_steps = scripted(calc, finish_reply("42"), tools=["calculator"])
        first = await run_to_end(client, two_steps, A)
        second = await run_to_end(client, finishing("41"), A)
        other = await run_to_end(client, finishing("b's"), B)
        response = await client.get(
            "/runs/compare", params={"ids": f"{first['id']},{second['id']}"}, headers=A
        )
        assert response.status_code == 200, response.text
        view = response.json()
        assert [r["id"] for r in view["runs"]] == [first["id"], second["id"]]
        assert [r["answer"] for r in view["runs"]] == ["42", "41"]
        assert [r["reason"] for r in view["runs"]] == ["finished", "finished"]
        assert [s["step"] for s in view["steps"]] == [1, 2]
        one, two = view["steps"]
        assert one["runs"][0]["tools"] == ["calculator"]
        assert one["runs"][1] is not None
        assert two["runs"][1] is None  # the second run ended at its first step

        foreign = await client.get(
            "/runs/compare", params={"ids": f"{first['id']},{other['id']}"}, headers=A
        )
        assert foreign.status_code == 404, foreign.text


@pytest.mark.parametrize(
    "ids",
    [
        "run_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "a,b",
        "run_01ARZ3NDEKTSV4RRFFQ69G5FAV,run_01ARZ3NDEKTSV4RRFFQ69G5FAV",
    ],
)
async def test_compare_wants_two_to_four_distinct_run_ids(ids: str) -> None:
    async with api_client(settings()) as client:
        response = await client.get("/runs/compare", params={"ids": ids})
        assert response.status_code == 422, response.text
        assert "ids" in response.text


async def test_compare_of_five_runs_is_refused() -> None:
    ids = ",".join(f"run_01ARZ3NDEKTSV4RRFFQ69G5FA{c}" for c in "VWXYZ")
    async with api_client(settings()) as client:
        response = await client.get("/runs/compare", params={"ids": ids})
        assert response.status_code == 422, response.text


async def test_a_waiting_run_cancelled_is_counted_with_its_approval_wait(store_url: str) -> None:
    """The run ends through the waiting side of the store (not the recorder's append), and
    its summary is written there too."""
    calc = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}, "id": "c1"}]}
    config = settings(store_url=store_url, approval_tools=["calculator"])
    async with api_client(config) as client:
        run = await create(client, scripted(calc, finish_reply("2"), tools=["calculator"]))
        waiting = await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})
        assert waiting.json()["status"] == "requires_action", waiting.text
        await cancel(client, run["id"])
        got = await report(client, {})
        assert got["runs"] == 1
        assert got["groups"][0]["by_reason"]["cancelled"] == 1
        assert got["groups"][0]["by_status"]["cancelled"] == 1
