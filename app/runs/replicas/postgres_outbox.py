"""The webhook outbox on Postgres (`PostgresCoordinator`'s): `webhook_due` on the run's row,
set by the store's save that ends a run with a webhook. One replica takes each entry (a
delivery lease in `webhook_owner`/`webhook_until`, renewed while it delivers) and clears it
once delivered; one whose deliverer died is taken again once its lease lapses."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable

import structlog

from app.runs.replicas.cluster import ClusterMember
from app.runs.replicas.postgres_queue import WEBHOOK_DONE, WEBHOOK_HOLD, WEBHOOKS_TAKE
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.postgres_errors import is_outage

log = structlog.get_logger("finishline.runs")


class PostgresOutbox:
    def __init__(self, store: PostgresRunStore, *, replica: str, lease_s: float) -> None:
        self.store = store
        self.replica = replica
        self.lease_s = lease_s
        self.bell = asyncio.Event()
        """Rung by a `w:` notification: an entry is due."""

    async def take(self, member: ClusterMember, wait_s: float) -> None:
        """Take the entries due (up to 10) and deliver each in a task of its own; none:
        wait for the bell, `wait_s` at most."""
        self.bell.clear()
        rows = await self.store.query(WEBHOOKS_TAKE, (self.replica, self.lease_s))
        for (run_id,) in rows:
            asyncio.create_task(self._deliver(str(run_id), member))  # noqa: RUF006
        if not rows:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.bell.wait(), wait_s)

    async def _deliver(self, run_id: str, member: ClusterMember) -> None:
        log.info("webhook_delivering", run_id=run_id)
        holding = asyncio.create_task(self._hold(run_id))
        try:
            await handled("webhook_failed", member.deliver_webhook(run_id))
        except Exception:  # Postgres is away: still due, taken again after the lease
            return
        finally:
            holding.cancel()
        try:
            await self.store.query(WEBHOOK_DONE, (run_id, self.replica))
        except Exception as exc:  # still due: delivered again after the lease (Webhook-Id)
            log.warning("webhook_ack_failed", run_id=run_id, error=str(exc))

    async def _hold(self, run_id: str) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            with contextlib.suppress(Exception):
                params = (self.lease_s, run_id, self.replica)
                rows = await self.store.query(WEBHOOK_HOLD, params)
                if not rows:
                    log.warning("webhook_entry_lost", run_id=run_id)
                    return


async def handled(event: str, work: Awaitable[None]) -> None:
    """Await this replica's part of a queued run or an outbox entry: an outage is raised (it
    is handed out again once Postgres is back); anything else is logged and swallowed."""
    try:
        await work
    except Exception as exc:
        if is_outage(exc):
            raise
        log.exception(event)
