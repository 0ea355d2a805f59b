"""/healthz, /readyz, /metrics and the viewer at /: open, and saying what they should."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.runs.metrics import MODEL_LABELS, RunMetrics
from tests.api.kit import app_with_state, finish, finishing, run_to_end, scripted, settings
from tests.fakes.service import api_client


async def test_healthz_is_200() -> None:
    async with api_client(settings()) as client:
        response = await client.get("/healthz")
        assert response.status_code == 200
        assert response.json()["status"] == "ok"


async def test_readyz_is_200_when_the_store_answers() -> None:
    async with api_client(settings()) as client:
        response = await client.get("/readyz")
        assert response.status_code == 200
        assert response.json() == {"status": "ready", "detail": None}


async def test_readyz_is_503_while_draining() -> None:
    async with app_with_state(settings()) as (client, state):
        state["manager"].begin_drain(0)

        response = await client.get("/readyz")

        assert response.status_code == 503
        assert response.json()["status"] == "draining"
        assert (await client.get("/healthz")).status_code == 200


async def test_readyz_is_503_when_the_store_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    async def unreachable() -> None:
        raise OSError("disk I/O error")

    async with app_with_state(settings()) as (client, state):
        monkeypatch.setattr(state["manager"].store, "ping", unreachable)

        response = await client.get("/readyz")

        assert response.status_code == 503
        assert response.json() == {"status": "unavailable", "detail": "store: disk I/O error"}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_metrics_count_runs_by_status_and_reason_in_prometheus_text() -> None:
    async with api_client(settings()) as client:
        await run_to_end(client, {"task": "What is 2 + 3?", "tools": ["calculator"]})
        await run_to_end(client, finishing())
        await run_to_end(client, scripted({"content": "x"}, settings={"max_steps": 2}))

        response = await client.get("/metrics")

        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        values = samples(response.text)
        completed = (("reason", "finished"), ("status", "completed"))
        failed = (("reason", "error"), ("status", "failed"))
        assert values[("finishline_runs_total", completed)] == 2
        assert values[("finishline_runs_total", failed)] == 1
        assert values[("finishline_runs_accepted_total", ())] == 3
        assert values[("finishline_run_steps_count", ())] == 3
        assert values[("finishline_llm_call_seconds_count", ())] >= 4
        assert values[("finishline_tool_call_seconds_count", (("tool", "calculator"),))] == 1
        assert values[("finishline_runs_active", ())] == 0
        assert values[("finishline_runs_queued", ())] == 0
        assert ("finishline_sse_subscribers", ()) in values


async def test_metrics_count_the_termination_reports_counters() -> None:
    async with api_client(settings()) as client:
        await run_to_end(client, finishing())
        plain = {"content": "x"}
        await run_to_end(client, scripted(plain, plain, settings={"max_steps": 1}))
        values = samples((await client.get("/metrics")).text)
    ends = "finishline_run_ends_total"
    assert values[(ends, (("model", "scripted"), ("reason", "finished")))] == 1
    assert values[(ends, (("model", "scripted"), ("reason", "max_steps")))] == 1
    assert values[("finishline_runs_finish_tool_total", (("model", "scripted"),))] == 1
    assert values[("finishline_runs_degraded_total", (("model", "scripted"),))] == 1
    assert values[("finishline_interventions_total", (("kind", "max_steps"),))] == 1


async def test_metrics_of_two_apps_are_separate() -> None:
    async with api_client(settings()) as first:
        await run_to_end(first, finishing())
    async with api_client(settings()) as second:
        values = samples((await second.get("/metrics")).text)
        assert values[("finishline_runs_accepted_total", ())] == 0


async def test_root_serves_the_run_viewer_page() -> None:
    async with api_client(settings()) as client:
        response = await client.get("/")

        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/html")
        assert "<html" in response.text.lower()


async def test_metrics_count_llm_cost_by_model_and_unpriced_calls() -> None:
    prices = {"scripted": {"input_per_mtok": 2.0, "output_per_mtok": 10.0}}
    usage = {"prompt_tokens": 1000, "completion_tokens": 100}  # $0.003 a call
    async with api_client(settings(model_prices=prices)) as client:
        await run_to_end(client, scripted({**finish("1"), "usage": usage}))
        await run_to_end(client, scripted({**finish("2"), "usage": usage}))
        values = samples((await client.get("/metrics")).text)
    assert values[("finishline_llm_cost_usd_total", (("model", "scripted"),))] == 0.006
    assert ("finishline_llm_unpriced_calls_total", (("model", "scripted"),)) not in values


def test_an_unpriced_call_is_counted_and_model_labels_are_bounded() -> None:
    metrics = RunMetrics()
    metrics.llm_call(5, "my-llama", None)
    for n in range(MODEL_LABELS + 10):
        metrics.llm_call(5, f"model-{n}", 0.5)
    values = samples(generate_latest(metrics.registry).decode())
    assert values[("finishline_llm_unpriced_calls_total", (("model", "my-llama"),))] == 1
    models = {
        dict(labels)["model"] for name, labels in values if name.startswith("finishline_llm_cost")
    }
    assert len(models) == MODEL_LABELS  # 63 models of their own, then "other"
    assert values[("finishline_llm_cost_usd_total", (("model", "other"),))] == 11 * 0.5
