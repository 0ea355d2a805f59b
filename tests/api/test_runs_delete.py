"""DELETE /runs/{id}: an ended run and its events go; a live run stays (409)."""

from __future__ import annotations

from tests.api.kit import cancel, create, error_of, finishing, hanging, run_to_end, settings
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
