"""Traces from the service as it is deployed: a uvicorn process configured by the standard
OTEL_* variables alone exports a run's spans to a real OTLP/HTTP receiver, and SIGTERM
flushes what is still batched."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.e2e.kit import sqlite_url
from tests.fakes.otlp import OtlpReceiver
from tests.fakes.process import AppProcess

pytestmark = pytest.mark.e2e


async def test_a_served_run_reaches_the_collector_by_the_time_sigterm_is_done(
    tmp_path: Path,
) -> None:
    async with OtlpReceiver() as otlp:
        env = {
            "FINISHLINE_STORE_URL": sqlite_url(tmp_path),
            "FINISHLINE_DEMO_DELAY_S": "0",
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
            "OTEL_SERVICE_NAME": "finishline-e2e",
            "OTEL_BSP_SCHEDULE_DELAY": "600000",  # nothing leaves before the shutdown's flush
        }
        async with AppProcess(tmp_path, env) as app:
            async with httpx.AsyncClient(base_url=app.url()) as client:
                body = {"task": "what time is it?", "model": "demo", "tools": ["current_time"]}
                created = (await client.post("/runs", json=body)).json()
                response = await client.get(f"/runs/{created['id']}/wait?timeout_s=30")
                run = response.json()
            assert run["status"] == "completed"
            assert otlp.spans == []
            app.terminate()
            assert await app.wait_exit(timeout_s=30) in (0, -15)  # uvicorn re-raises SIGTERM
            assert "service_stopped" in [e.get("event") for e in app.log_events()]

    names = [span.name for span in otlp.spans]
    assert names.count("invoke_agent") == 1
    assert "chat demo" in names
    assert any(name.startswith("execute_tool ") for name in names)
    assert {span.trace_id for span in otlp.spans} == {run["trace_id"]}
    assert {span.resource["service.name"] for span in otlp.spans} == {"finishline-e2e"}
