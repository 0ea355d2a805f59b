"""The cluster queue's cap on the Redis store (DESIGN §8) is checked and taken in one atomic
step: POSTs racing on two replicas (two services on one redis-server) admit exactly the cap."""

from __future__ import annotations

import anyio
import httpx

from tests.api.kit import cancel, create, hanging, settings, wait_for_status
from tests.fakes.service import api_client

CAP = 3
POSTS = 24


async def test_concurrent_posts_on_two_replicas_admit_exactly_the_queue_cap(
    redis_url: str,
) -> None:
    config = settings(store_url=redis_url, max_concurrent_runs=1, max_queued_runs=CAP)
    async with api_client(config) as a, api_client(config) as b:
        busy = [await create(a, hanging()), await create(b, hanging())]
        for run in busy:  # one slot per replica, both taken: nothing leaves the queue
            await wait_for_status(a, run["id"], "running")

        answers: list[httpx.Response] = []

        async def post(client: httpx.AsyncClient) -> None:
            answers.append(await client.post("/runs", json=hanging()))

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for index in range(POSTS):
                    tg.start_soon(post, (a, b)[index % 2])

        codes = sorted(r.status_code for r in answers)
        assert codes == [202] * CAP + [429] * (POSTS - CAP), [r.text for r in answers]
        refused = next(r for r in answers if r.status_code == 429)
        assert refused.json()["error"]["type"] == "queue_full"
        queued = (await a.get("/runs", params={"status": "queued"})).json()["runs"]
        assert len(queued) == CAP
        for run in [*busy, *queued]:
            await cancel(a, run["id"])
