"""What a run costs, end to end: the service over real HTTP, the model an OpenAI-compatible
endpoint (the fake LLM) reporting usage with cached prompt tokens, and the price genai-prices'
own: `usage.cost_usd` is what genai-prices computes for those calls of `gpt-4o-mini`, and so is
what GET /usage says the caller's key spent today."""

from __future__ import annotations

from decimal import Decimal

import pytest
from genai_prices import Usage, calc_price

from tests.e2e.kit import e2e_settings, follow, start_run, stored_events
from tests.fakes.llm_server import FakeLLMServer, FakeReply, FakeUsage
from tests.fakes.service import served_app

pytestmark = pytest.mark.e2e

MODEL = "gpt-4o-mini"
USAGES = [FakeUsage(1234, 56), FakeUsage(2345, 78, cached_tokens=1024), FakeUsage(2500, 9, 2048)]


def genai_prices_cost(usage: FakeUsage) -> Decimal:
    """What genai-prices says one call costs: its input tokens include the cached ones."""
    priced = Usage(
        input_tokens=usage.prompt_tokens,
        cache_read_tokens=usage.cached_tokens,
        output_tokens=usage.completion_tokens,
    )
    return calc_price(priced, MODEL).total_price


@pytest.mark.parametrize("stream_tokens", [False, True], ids=["whole", "streamed"])
async def test_a_runs_cost_is_what_genai_prices_computes_for_its_calls(
    store_url: str, stream_tokens: bool
) -> None:
    replies = [
        FakeReply.call("calculator", {"expression": "6*7"}, usage=USAGES[0]),
        FakeReply.call("calculator", {"expression": "7*6"}, usage=USAGES[1]),
        FakeReply.finish("42", usage=USAGES[2]),
    ]
    body = {
        "task": "What is 6*7?",
        "model": MODEL,
        "tools": ["calculator"],
        "settings": {"stream_tokens": stream_tokens},
    }
    async with (
        FakeLLMServer(replies) as llm,
        served_app(e2e_settings(llm, store_url=store_url)) as (_, client),
    ):
        run_id = await start_run(client, body)
        streamed = await follow(client, run_id)
        run = (await client.get(f"/runs/{run_id}")).json()
        events = await stored_events(client, run_id)
        usage = (await client.get("/usage")).json()  # the day of the caller's key

    assert run["status"] == "completed", run
    expected = [genai_prices_cost(usage) for usage in USAGES]
    calls = [e for e in events if e["type"] == "llm.call"]
    assert [c["cached_tokens"] for c in calls] == [0, 1024, 2048]
    assert [c["cost_usd"] for c in calls] == [pytest.approx(float(e), rel=1e-12) for e in expected]
    total = float(sum(expected))
    assert total > 0
    assert run["usage"]["cost_usd"] == pytest.approx(total, rel=1e-12)
    assert streamed[-1].event == "run.completed"
    assert streamed[-1].data["usage"]["cost_usd"] == run["usage"]["cost_usd"]
    assert usage["cost_usd"] == pytest.approx(total, rel=1e-9)
    assert (usage["llm_calls"], usage["unpriced_calls"]) == (3, 0)
