"""POST /runs/{id}/cancel: 202 with the cancelled run, whether it was running or queued."""

from __future__ import annotations

from tests.api.kit import (
    create,
    error_of,
    finishing,
    hanging,
    json_events,
    run_to_end,
    settings,
    wait_for_status,
)
from tests.fakes.service import api_client

UNKNOWN = "run_00000000000000000000000000"


async def test_cancelling_a_running_run_answers_202_with_the_cancelled_run() -> None:
    async with api_client(settings()) as client:
        run = await create(client, hanging())
        await wait_for_status(client, run["id"], "running")

        response = await client.post(f"/runs/{run['id']}/cancel")

        assert response.status_code == 202
        assert response.headers["content-location"] == f"/runs/{run['id']}"
        cancelled = response.json()
        assert cancelled["id"] == run["id"]
        assert cancelled["status"] == "cancelled"
        assert cancelled["result"] == {"answer": None, "reason": "cancelled", "degraded": False}
        assert cancelled["ended_at"] is not None
        page = await json_events(client, run["id"])
        assert page["done"] is True
        assert page["events"][-1]["type"] == "run.cancelled"
        assert [e["type"] for e in page["events"]].count("run.cancelled") == 1


async def test_cancelling_a_queued_run_answers_202_and_it_never_starts() -> None:
    async with api_client(settings(max_concurrent_runs=1)) as client:
        running = await create(client, hanging())
        await wait_for_status(client, running["id"], "running")
        queued = await create(client, finishing())
        assert (await client.get(f"/runs/{queued['id']}")).json()["status"] == "queued"

        response = await client.post(f"/runs/{queued['id']}/cancel")

        assert response.status_code == 202
        assert response.json()["status"] == "cancelled"
        assert response.json()["started_at"] is None
        types = [e["type"] for e in (await json_events(client, queued["id"]))["events"]]
        assert types == ["run.queued", "run.cancelled"]
        assert (await client.get(f"/runs/{running['id']}")).json()["status"] == "running"
        assert (await client.post(f"/runs/{running['id']}/cancel")).status_code == 202


async def test_cancelling_the_running_run_starts_the_queued_one() -> None:
    async with api_client(settings(max_concurrent_runs=1)) as client:
        running = await create(client, hanging())
        queued = await create(client, finishing("next"))

        await client.post(f"/runs/{running['id']}/cancel")

        ended = (await client.get(f"/runs/{queued['id']}/wait", params={"timeout_s": 10})).json()
        assert ended["result"]["answer"] == "next"


async def test_cancelling_an_ended_run_is_409() -> None:
    async with api_client(settings()) as client:
        run = await run_to_end(client, finishing())

        response = await client.post(f"/runs/{run['id']}/cancel")

        error = error_of(response, 409, "run_already_ended")
        assert error["details"] == {"run_id": run["id"]}
        assert (await client.get(f"/runs/{run['id']}")).json()["status"] == "completed"


async def test_cancelling_twice_is_409_the_second_time() -> None:
    async with api_client(settings()) as client:
        run = await create(client, hanging())
        assert (await client.post(f"/runs/{run['id']}/cancel")).status_code == 202

        error_of(await client.post(f"/runs/{run['id']}/cancel"), 409, "run_already_ended")


async def test_cancelling_an_unknown_run_is_404() -> None:
    async with api_client(settings()) as client:
        error_of(await client.post(f"/runs/{UNKNOWN}/cancel"), 404, "not_found")
