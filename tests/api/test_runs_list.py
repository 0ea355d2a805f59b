"""GET /runs: newest first, filtered by status, paged by limit and cursor."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.api.kit import (
    cancel,
    create,
    error_of,
    finishing,
    hanging,
    run_to_end,
    scripted,
    settings,
    wait_for_status,
)
from tests.fakes.service import api_client


async def ids(client: httpx.AsyncClient, **params: Any) -> list[str]:
    response = await client.get("/runs", params=params)
    assert response.status_code == 200, response.text
    return [run["id"] for run in response.json()["runs"]]


async def test_runs_are_listed_newest_first() -> None:
    async with api_client(settings()) as client:
        created = [(await create(client, finishing(str(n))))["id"] for n in range(12)]

        assert await ids(client) == created[::-1]


async def test_empty_list_has_no_cursor() -> None:
    async with api_client(settings()) as client:
        response = await client.get("/runs")
        assert response.json() == {"runs": [], "next_cursor": None, "unreadable": []}


async def test_listed_runs_are_the_full_run_objects() -> None:
    async with api_client(settings()) as client:
        run = await run_to_end(client, finishing("42", metadata={"k": "v"}))

        listed = (await client.get("/runs")).json()["runs"]

        assert listed == [run]


async def mixed_statuses(client: httpx.AsyncClient) -> dict[str, str]:
    """One run in each of completed, failed, incomplete and running; status -> id."""
    completed = await run_to_end(client, finishing())
    failed = await run_to_end(client, scripted({"content": "hm"}, settings={"max_steps": 3}))
    incomplete = await run_to_end(
        client,
        scripted(
            {"content": "a"},
            settings={"max_steps": 1, "stop_tool": True, "final_answer_on_limit": False},
        ),
    )
    running = await create(client, hanging())
    await wait_for_status(client, running["id"], "running")
    found = {
        "completed": completed["id"],
        "failed": failed["id"],
        "incomplete": incomplete["id"],
        "running": running["id"],
    }
    assert [completed["status"], failed["status"], incomplete["status"]] == [
        "completed",
        "failed",
        "incomplete",
    ]
    return found


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"status": "failed"}, ["failed"]),
        ({"status": ["completed", "running"]}, ["running", "completed"]),
        ({"status": "completed,incomplete"}, ["incomplete", "completed"]),
        ({"status": ["failed, running", "completed"]}, ["running", "failed", "completed"]),
        ({"status": "cancelled"}, []),
    ],
    ids=["single", "repeated", "comma-list", "both", "none-match"],
)
async def test_status_filter(params: dict[str, Any], expected: list[str]) -> None:
    async with api_client(settings()) as client:
        by_status = await mixed_statuses(client)

        assert await ids(client, **params) == [by_status[s] for s in expected]
        await cancel(client, by_status["running"])


async def test_unknown_status_is_422_naming_the_allowed_ones() -> None:
    async with api_client(settings()) as client:
        response = await client.get("/runs", params={"status": "completed,done"})

        error = error_of(response, 422, "validation_error")
        assert error["details"] == {"field": "status"}
        assert "'done'" in error["message"]
        assert "incomplete" in error["message"]


async def test_limit_defaults_to_50() -> None:
    async with api_client(settings()) as client:
        for _ in range(51):
            await create(client, finishing())

        page = (await client.get("/runs")).json()

        assert len(page["runs"]) == 50
        assert page["next_cursor"] == page["runs"][-1]["id"]


@pytest.mark.parametrize("limit", [1, 200])
async def test_limit_within_1_to_200_is_accepted(limit: int) -> None:
    async with api_client(settings()) as client:
        await create(client, finishing())
        assert (await client.get("/runs", params={"limit": limit})).status_code == 200


@pytest.mark.parametrize("limit", ["0", "201", "-1", "ten"])
async def test_limit_outside_1_to_200_is_422(limit: str) -> None:
    async with api_client(settings()) as client:
        response = await client.get("/runs", params={"limit": limit})

        error = error_of(response, 422, "validation_error")
        assert error["details"]["errors"][0]["field"] == "limit"


async def test_cursor_pages_through_every_run_once_in_order() -> None:
    async with api_client(settings()) as client:
        created = [(await create(client, finishing(str(n))))["id"] for n in range(7)]

        pages: list[list[str]] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 3} | ({"cursor": cursor} if cursor else {})
            page = (await client.get("/runs", params=params)).json()
            pages.append([run["id"] for run in page["runs"]])
            cursor = page["next_cursor"]
            if cursor is None:
                break
            assert cursor == pages[-1][-1]

        assert [len(p) for p in pages] == [3, 3, 1]
        assert [run_id for page in pages for run_id in page] == created[::-1]


async def test_cursor_is_null_when_the_last_page_is_exactly_full() -> None:
    async with api_client(settings()) as client:
        for _ in range(3):
            await create(client, finishing())

        page = (await client.get("/runs", params={"limit": 3})).json()

        assert len(page["runs"]) == 3
        assert page["next_cursor"] is None


async def test_cursor_combines_with_the_status_filter() -> None:
    async with api_client(settings()) as client:
        done = [(await run_to_end(client, finishing()))["id"] for _ in range(3)]
        await run_to_end(client, scripted({"content": "x"}, settings={"max_steps": 2}))

        first = (await client.get("/runs", params={"status": "completed", "limit": 2})).json()
        rest = (
            await client.get(
                "/runs",
                params={"status": "completed", "limit": 2, "cursor": first["next_cursor"]},
            )
        ).json()

        assert [r["id"] for r in first["runs"] + rest["runs"]] == done[::-1]
        assert rest["next_cursor"] is None


@pytest.mark.parametrize("cursor", ["nope", "run_123", "run_" + "a" * 26, "' OR 1=1 --"])
async def test_invalid_cursor_is_422(cursor: str) -> None:
    async with api_client(settings()) as client:
        response = await client.get("/runs", params={"cursor": cursor})

        error = error_of(response, 422, "validation_error")
        assert error["details"]["errors"][0]["field"] == "cursor"


async def test_runs_created_within_one_millisecond_still_list_newest_first() -> None:
    async with api_client(settings()) as client:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tasks:
                for n in range(40):
                    tasks.start_soon(create, client, finishing(str(n)))

        runs = (await client.get("/runs")).json()["runs"]

        created_at = [datetime.fromisoformat(run["created_at"]) for run in runs]
        assert created_at == sorted(created_at, reverse=True)


async def test_sqlite_store_lists_pages_and_deletes_the_same_way(tmp_path: Path) -> None:
    async with api_client(settings(store_url=f"sqlite:///{tmp_path}/runs.db")) as client:
        created = [(await run_to_end(client, finishing(str(n))))["id"] for n in range(5)]

        first = (await client.get("/runs", params={"limit": 3})).json()
        rest = (await client.get("/runs", params={"cursor": first["next_cursor"]})).json()
        assert [r["id"] for r in first["runs"] + rest["runs"]] == created[::-1]
        assert await ids(client, status="completed") == created[::-1]
        assert (await client.delete(f"/runs/{created[0]}")).status_code == 204
        assert await ids(client) == created[:0:-1]


@pytest.mark.parametrize("status", ["", " ", "completed,", ",failed", "completed,,failed"])
async def test_empty_status_is_422(status: str) -> None:
    async with api_client(settings()) as client:
        response = await client.get("/runs", params={"status": status})
        assert error_of(response, 422)["details"]["errors"][0]["field"] == "status[0]"
