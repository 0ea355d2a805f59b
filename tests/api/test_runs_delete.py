"""DELETE /runs/{id}: an ended run and its events go (on every store, as soon as its terminal
event is out); a live run stays (409)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import app.main
import app.runs.manager
from app.engine.events import TERMINAL_EVENT_TYPES
from app.runs.backends import open_store
from tests.api.kit import cancel, create, error_of, finishing, hanging, run_to_end, settings, sse
from tests.e2e.kit import sqlite_url
from tests.fakes.service import api_client

UNKNOWN = "run_00000000000000000000000000"


async def test_deleting_an_ended_run_answers_204_then_it_and_its_events_are_gone() -> None:
    async with api_client(settings()) as client:
        kept = await run_to_end(client, finishing("kept"))
        run = await run_to_end(client, finishing())

        response = await client.delete(f"/runs/{run['id']}")

        assert response.status_code == 204
        assert response.content == b""
        error_of(await client.get(f"/runs/{run['id']}"), 404, "not_found")
        error_of(
            await client.get(f"/runs/{run['id']}/events", headers={"Accept": "application/json"}),
            404,
        )
        error_of(await client.get(f"/runs/{run['id']}/events"), 404)
        error_of(await client.get(f"/runs/{run['id']}/wait"), 404)
        listed = (await client.get("/runs")).json()["runs"]
        assert [r["id"] for r in listed] == [kept["id"]]


async def test_deleting_twice_is_404_the_second_time() -> None:
    async with api_client(settings()) as client:
        run = await run_to_end(client, finishing())
        assert (await client.delete(f"/runs/{run['id']}")).status_code == 204

        error_of(await client.delete(f"/runs/{run['id']}"), 404, "not_found")


async def test_deleting_a_running_run_is_409_and_keeps_it() -> None:
    async with api_client(settings()) as client:
        run = await create(client, hanging())

        response = await client.delete(f"/runs/{run['id']}")

        error = error_of(response, 409, "run_not_ended")
        assert "cancel it first" in error["message"]
        assert (await client.get(f"/runs/{run['id']}")).status_code == 200
        await cancel(client, run["id"])
        assert (await client.delete(f"/runs/{run['id']}")).status_code == 204


async def test_deleting_a_queued_run_is_409() -> None:
    async with api_client(settings(max_concurrent_runs=1)) as client:
        first = await create(client, hanging())
        queued = await create(client, finishing())

        error_of(await client.delete(f"/runs/{queued['id']}"), 409, "run_not_ended")
        await cancel(client, first["id"])


async def test_deleting_an_unknown_run_is_404() -> None:
    async with api_client(settings()) as client:
        error_of(await client.delete(f"/runs/{UNKNOWN}"), 404, "not_found")


LATE_S = 0.02
"""How much later than its followers the run's task hears that its terminal event is stored
(a store under load answers the write after it published it): the window a DELETE sent on
the terminal event lands in."""


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    return "memory://" if request.param == "memory" else sqlite_url(tmp_path)


def terminal_writes_answered_after(
    monkeypatch: pytest.MonkeyPatch, answer: Callable[[], Awaitable[object]]
) -> None:
    """The app's real store, whose terminal appends are stored (and published to the run's
    followers) at once and answered once `answer()` returns: a store under load."""

    def opened(url: str, **options: Any) -> Any:
        store = open_store(url, **options)
        append = store.append

        async def answered_late(run_id: str, type: Any, *args: Any, **kwargs: Any) -> Any:
            event = await append(run_id, type, *args, **kwargs)
            if type in TERMINAL_EVENT_TYPES:
                await answer()
            return event

        store.append = answered_late  # type: ignore[method-assign]
        return store

    monkeypatch.setattr(app.main, "open_store", opened)


@pytest.fixture
def late_terminal_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Terminal appends answered `LATE_S` after they are stored (the store's slow answer,
    not a wait of the test)."""
    terminal_writes_answered_after(monkeypatch, lambda: asyncio.sleep(LATE_S))


@pytest.mark.usefixtures("late_terminal_writes")
async def test_a_run_is_deleted_as_soon_as_its_terminal_event_is_out(store_url: str) -> None:
    """Once a follower has the terminal event, DELETE deletes: the run's task may still be
    storing its end (or closing), and the delete waits for it; it never answers that an ended
    run has not ended. 50 runs, each deleted on its terminal event."""
    async with api_client(settings(store_url=store_url)) as client:
        for _ in range(50):
            run = await create(client, finishing())
            response, events = await sse(client, "GET", f"/runs/{run['id']}/events")
            assert response.status_code == 200
            assert events[-1].event == "run.completed"

            deleted = await client.delete(f"/runs/{run['id']}")

            assert deleted.status_code == 204, deleted.text
            error_of(await client.get(f"/runs/{run['id']}"), 404, "not_found")
            error_of(
                await client.get(
                    f"/runs/{run['id']}/events", headers={"Accept": "application/json"}
                ),
                404,
            )


async def test_a_run_still_closing_past_the_wait_is_409_run_closing_never_not_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    released = asyncio.Event()  # the store's answer, held until the test has its 409
    terminal_writes_answered_after(monkeypatch, released.wait)
    monkeypatch.setattr(app.runs.manager, "CANCEL_SETTLE_S", 0.05)
    async with api_client(settings()) as client:
        run = await create(client, finishing())
        _, events = await sse(client, "GET", f"/runs/{run['id']}/events")
        assert events[-1].event == "run.completed"

        closing = await client.delete(f"/runs/{run['id']}")
        released.set()

        error = error_of(closing, 409, "run_closing")
        assert "is completed" in error["message"]
        assert closing.headers["Retry-After"] == "1"
        assert error["details"]["run_id"] == run["id"]
        await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 5})
        assert (await client.delete(f"/runs/{run['id']}")).status_code == 204
