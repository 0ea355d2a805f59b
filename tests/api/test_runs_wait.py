"""GET /runs/{id}/wait?timeout_s=: the run once it ends, or as it stands at the timeout."""

from __future__ import annotations

import time

import anyio
import pytest

from tests.api.kit import cancel, create, error_of, finishing, hanging, run_to_end, settings
from tests.fakes.service import api_client

UNKNOWN = "run_00000000000000000000000000"


async def test_wait_returns_the_run_once_it_has_ended() -> None:
    async with api_client(settings()) as client:
        run = await create(client, finishing("42"))

        response = await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 10})

        assert response.status_code == 200
        assert response.json()["status"] == "completed"
        assert response.json()["result"]["answer"] == "42"


async def test_wait_on_an_ended_run_returns_at_once() -> None:
    async with api_client(settings()) as client:
        run = await run_to_end(client, finishing())

        response = await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 0})

        assert response.json() == run


async def test_wait_returns_the_running_run_at_its_timeout() -> None:
    async with api_client(settings()) as client:
        run = await create(client, hanging())

        response = await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 0.05})

        assert response.status_code == 200
        assert response.json()["status"] == "running"
        assert response.json()["result"] is None
        await cancel(client, run["id"])


async def test_wait_returns_the_queued_run_at_its_timeout() -> None:
    async with api_client(settings(max_concurrent_runs=1)) as client:
        first = await create(client, hanging())
        second = await create(client, hanging())

        response = await client.get(f"/runs/{second['id']}/wait", params={"timeout_s": 0.01})

        assert response.json()["status"] == "queued"
        await cancel(client, second["id"])
        await cancel(client, first["id"])


async def test_wait_over_the_server_cap_is_422_naming_the_cap() -> None:
    async with api_client(settings(max_wait_s=5)) as client:
        run = await create(client, finishing())

        response = await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 5.5})

        error = error_of(response, 422, "validation_error")
        assert error["details"] == {"field": "timeout_s", "cap": 5}
        assert "5.5 exceeds the server cap of 5" in error["message"]


@pytest.mark.parametrize("timeout_s", ["-1", "soon", "nan", "inf"])
async def test_wait_with_an_invalid_timeout_is_422(timeout_s: str) -> None:
    async with api_client(settings()) as client:
        run = await run_to_end(client, finishing())

        response = await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": timeout_s})

        error_of(response, 422, "validation_error")


async def test_wait_on_an_unknown_run_is_404() -> None:
    async with api_client(settings()) as client:
        response = await client.get(f"/runs/{UNKNOWN}/wait", params={"timeout_s": 1})
        error_of(response, 404, "not_found")


async def test_wait_without_timeout_waits_at_most_a_lower_server_cap() -> None:
    async with api_client(settings(max_wait_s=0.2)) as client:
        run = await create(client, hanging())
        started = time.monotonic()

        with anyio.fail_after(10):  # the default wait is 30 s: a missed cap fails here
            response = await client.get(f"/runs/{run['id']}/wait")

        assert time.monotonic() - started >= 0.2  # it did wait, for the whole cap
        assert response.status_code == 200
        assert response.json()["status"] in ("queued", "running")
        await cancel(client, run["id"])
