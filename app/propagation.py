"""W3C trace context on outbound requests, without OpenTelemetry.

A traced run sets `TRACEPARENT` in its own task (`app.tracing`); every httpx client the
service makes (LLM endpoints, HTTP tools, webhooks) carries `propagate` as a request hook
(`event_hooks={"request": [propagate]}`),
which adds the `traceparent` header when one is set. Tasks inherit context variables, so a
webhook delivery started by a run carries that run's trace. With tracing off the variable is
never set and the hook is one context-variable read.
"""

from __future__ import annotations

from contextvars import ContextVar

import httpx

TRACEPARENT: ContextVar[str | None] = ContextVar("finishline_traceparent", default=None)


async def propagate(request: httpx.Request) -> None:
    """httpx request hook: the current run's `traceparent`, unless the request has its own."""
    value = TRACEPARENT.get()
    if value is not None and "traceparent" not in request.headers:
        request.headers["traceparent"] = value
