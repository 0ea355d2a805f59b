"""The queue cap holds under concurrency: checking for room and taking it are one step, so
a burst of POST /runs cannot all slip through while the first ones are still being stored."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx

from tests.api.kit import error_of, hanging, settings
from tests.fakes.service import served_app


async def test_forty_concurrent_posts_get_exactly_slots_plus_queue_202s(tmp_path: Path) -> None:
    capped = settings(
        store_url=f"sqlite:///{tmp_path / 'runs.db'}", max_concurrent_runs=1, max_queued_runs=2
    )
    async with served_app(capped) as (_, client):
        answers: list[httpx.Response] = []

        async def post() -> None:
            answers.append(await client.post("/runs", json=hanging()))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tasks:
                for _ in range(40):
                    tasks.start_soon(post)

        statuses = sorted(a.status_code for a in answers)
        assert statuses == [202] * 3 + [429] * 37
        for refused in (a for a in answers if a.status_code == 429):
            error_of(refused, 429, "queue_full")
            assert refused.headers["Retry-After"]
        active = (await client.get("/runs", params={"status": "queued,running"})).json()["runs"]
        assert len(active) == 3
