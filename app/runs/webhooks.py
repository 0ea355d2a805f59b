"""Delivery of a run, as JSON, to its webhook once it ends: retried with exponential backoff,
every attempt recorded on the run. Webhook hosts pass the same allow-list and address checks
as HTTP tools."""

from __future__ import annotations

import asyncio

import structlog

from app.engine.errors import ToolError
from app.runs.records import WebhookAttempt, utcnow
from app.runs.store import RunStore
from app.runs.view import to_view
from app.tools.fetcher import HttpFetcher

log = structlog.get_logger("finishline.webhooks")


class WebhookSender:
    def __init__(
        self,
        *,
        store: RunStore,
        fetcher: HttpFetcher | None,
        attempts: int,
        backoff_s: float,
        timeout_s: float,
    ) -> None:
        self.store = store
        self.fetcher = fetcher
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s

    async def deliver(self, run_id: str) -> None:
        for attempt in range(1, self.attempts + 1):
            record = await self.store.get(run_id)
            if record is None or record.webhook is None or self.fetcher is None:
                return
            body = to_view(record).model_dump(mode="json")
            status, error = None, None
            try:
                response = await self.fetcher.fetch(
                    "POST", record.webhook.url, json=body, timeout_s=self.timeout_s
                )
                status = response.status_code
                if not response.ok:
                    error = f"answered {response.status_line}"
            except ToolError as exc:
                error = str(exc)
            record = await self.store.get(run_id)
            if record is None or record.webhook is None:
                return
            record.webhook.attempts.append(
                WebhookAttempt(at=utcnow(), status_code=status, error=error)
            )
            record.webhook.delivered = error is None
            await self.store.save(record)
            log.info(
                "webhook_attempted", run_id=run_id, attempt=attempt, status_code=status, error=error
            )
            if error is None:
                return
            if attempt < self.attempts:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
