"""The webhook outbox across replicas (DESIGN §8): two uvicorn processes on one redis-server.
A replica delivering a webhook holds its outbox entry as a lease: while it is alive nobody
else sends that webhook, however long the delivery takes; once it dies, another replica sends
it again within the lease, with the same `Webhook-Id` for the receiver to dedupe on."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from tests.e2e.kit import start_run, wait_for_run
from tests.e2e.test_replicas import finish, replica_logging, replicas, scripted
from tests.fakes.process import AppProcess
from tests.fakes.serving import Served

pytestmark = pytest.mark.e2e

LEASE_S = 2.0
ENV = {
    "FINISHLINE_LEASE_S": str(LEASE_S),
    "FINISHLINE_HTTP_TOOL_ALLOW_HOSTS": "127.0.0.1",
    "FINISHLINE_WEBHOOK_TIMEOUT_S": "60",  # the first attempt outlives the lease
}


class Receiver:
    """POST /hook: records each call's `Webhook-Id` and run id; the first call is held until
    `release` is set or its caller goes away; later calls answer 200 at once."""

    def __init__(self) -> None:
        self.calls: list[tuple[str | None, str]] = []
        self.first_arrived = anyio.Event()
        self.release = anyio.Event()
        self.arrived = anyio.Event()
        self.served = Served(
            Starlette(routes=[Route("/hook", self._hook, methods=["POST"])]),
            timeout_graceful_shutdown=1,
        )

    async def _hook(self, request: Request) -> Response:
        body = await request.json()
        self.calls.append((request.headers.get("Webhook-Id"), body["id"]))
        self.arrived.set()
        self.arrived = anyio.Event()
        if len(self.calls) > 1:
            return PlainTextResponse("ok")
        self.first_arrived.set()
        async with anyio.create_task_group() as tg:

            async def gone() -> None:
                while (await request.receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(gone)
            await self.release.wait()
            tg.cancel_scope.cancel()
        return PlainTextResponse("ok")

    async def wait_for_calls(self, count: int, timeout_s: float) -> None:
        with anyio.fail_after(timeout_s):
            while len(self.calls) < count:
                await self.arrived.wait()


async def deliverer(apps: Sequence[AppProcess], run_id: str) -> int:
    """The index of the replica whose log says it is delivering the run's webhook."""
    return await replica_logging(apps, "webhook_delivering", run_id)


async def test_a_webhook_whose_deliverer_dies_is_sent_again_within_the_lease_with_its_id(
    tmp_path: Path, redis_url: str
) -> None:
    receiver = Receiver()
    async with receiver.served, replicas(tmp_path, redis_url, **ENV) as started:
        apps = [app for app, _ in started]
        body: dict[str, Any] = scripted(finish("hooked"), webhook=receiver.served.url("/hook"))
        run_id = await start_run(started[0][1], body)
        with anyio.fail_after(10):
            await receiver.first_arrived.wait()  # the first delivery is in flight
        index = await deliverer(apps, run_id)
        apps[index].kill()
        killed = anyio.current_time()
        await receiver.wait_for_calls(2, timeout_s=30)
        assert anyio.current_time() - killed < LEASE_S + 8  # not the old 5 minutes
        survivor = started[1 - index][1]
        run = await wait_for_run(survivor, run_id, lambda r: bool(r["webhook"]["delivered"]))
        assert receiver.calls == [(f"{run_id}:ended", run_id)] * 2  # one dedupe key
        (attempt,) = run["webhook"]["attempts"]  # the dead replica recorded nothing
        assert attempt["status_code"] == 200


async def pending_idle_ms(redis: Redis, entry_count: int = 1) -> list[int]:
    pending: list[dict[str, Any]] = await redis.xpending_range(
        "finishline:webhooks", "senders", "-", "+", entry_count
    )
    return [int(p["time_since_delivered"]) for p in pending]


async def test_a_delivery_that_outlasts_the_lease_is_made_by_one_replica_only(
    tmp_path: Path, redis_url: str
) -> None:
    receiver = Receiver()
    redis = Redis.from_url(redis_url, decode_responses=True)
    async with receiver.served, replicas(tmp_path, redis_url, **ENV) as started:
        body: dict[str, Any] = scripted(finish("hooked"), webhook=receiver.served.url("/hook"))
        run_id = await start_run(started[0][1], body)
        with anyio.fail_after(10):
            await receiver.first_arrived.wait()
        # the deliverer holds its entry: its idle time keeps falling back under the lease;
        # wait until it has been held for twice the lease (the other replica would have
        # taken an entry idle past the lease)
        resets, last = 0, 0
        with anyio.fail_after(30):
            while resets < 6:  # a hold every third of the lease: 6 holds, 2 leases
                idle = await pending_idle_ms(redis)
                assert idle, "the entry left the outbox before its delivery ended"
                resets += idle[0] < last
                last = idle[0]
                assert idle[0] < LEASE_S * 1000
                await anyio.sleep(0.05)  # polling Redis for the next hold, not a sync point
        receiver.release.set()
        run = await wait_for_run(started[1][1], run_id, lambda r: bool(r["webhook"]["delivered"]))
        assert receiver.calls == [(f"{run_id}:ended", run_id)]
        assert len(run["webhook"]["attempts"]) == 1
    await redis.aclose()
