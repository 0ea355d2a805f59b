"""Delivery of a run, as JSON, to its webhook once it ends: retried with exponential backoff,
every attempt recorded on the run. The `JsonPoster` (see `app.assembly`) checks the host
against the same allow-list and address rules as HTTP tools.

Every request carries `Webhook-Id`, the same for every attempt and every replica that makes
it (`{run_id}:ended`; `{run_id}:requires_action:{step}` for a wait): the promise is
at-least-once, and a receiver dedupes on that key. A delivery redone after its replica died
(the Redis outbox) is skipped when the dead one had recorded success; only a death between
the receiver's answer and that record sends the webhook twice."""

from __future__ import annotations

import asyncio

import structlog

from app.runs.ports import JsonPoster
from app.runs.records import RunStatus, WebhookAttempt, utcnow
from app.runs.store import RunStore
from app.runs.view import to_view

log = structlog.get_logger("finishline.webhooks")

WEBHOOK_ID = "Webhook-Id"


def webhook_id(run_id: str, event: str, *more: object) -> dict[str, str]:
    """The request's dedupe header: one value per run and webhook event."""
    return {WEBHOOK_ID: ":".join([run_id, event, *map(str, more)])}


class WebhookSender:
    def __init__(
        self,
        *,
        store: RunStore,
        poster: JsonPoster | None,
        attempts: int,
        backoff_s: float,
        timeout_s: float,
    ) -> None:
        self.store = store
        self.poster = poster
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s

    async def notify_waiting(self, run_id: str) -> None:
        """POST the run as it begins to wait for a person (`webhook_events` has
        requires_action), retried with the same backoff while it still waits. Attempts are
        logged, not recorded: the waiting record belongs to the approvals desk."""
        try:
            await self._notify_waiting(run_id)
        except Exception:  # a task of the app's task group: never take the service down
            log.exception("webhook_failed", run_id=run_id, on="requires_action")

    async def _notify_waiting(self, run_id: str) -> None:
        for attempt in range(1, self.attempts + 1):
            record = await self.store.get(run_id)
            if record is None or record.webhook is None or self.poster is None:
                return
            if record.status != RunStatus.REQUIRES_ACTION:
                return  # decided or cancelled meanwhile: nobody needs the call any more
            body = to_view(record).model_dump(mode="json")
            headers = webhook_id(run_id, "requires_action", record.usage.steps)
            outcome = await self.poster.post_json(record.webhook.url, body, self.timeout_s, headers)
            log.info(
                "webhook_attempted",
                run_id=run_id,
                attempt=attempt,
                status_code=outcome.status_code,
                error=outcome.error,
                on="requires_action",
            )
            if outcome.error is None:
                return
            if attempt < self.attempts:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))

    async def deliver(self, run_id: str) -> None:
        """POST the ended run, retried; nothing when a delivery was recorded done already
        (a replica that died after it, before the outbox knew)."""
        for attempt in range(1, self.attempts + 1):
            record = await self.store.get(run_id)
            if record is None or record.webhook is None or self.poster is None:
                return
            if attempt == 1 and record.webhook.delivered:
                log.info("webhook_already_delivered", run_id=run_id)
                return
            body = to_view(record).model_dump(mode="json")
            outcome = await self.poster.post_json(
                record.webhook.url, body, self.timeout_s, webhook_id(run_id, "ended")
            )
            status, error = outcome.status_code, outcome.error
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
