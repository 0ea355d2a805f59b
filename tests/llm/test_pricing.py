"""Prices: genai-prices' data by provider (a known endpoint URL) or by model name alone,
FINISHLINE_MODEL_PRICES over it, the scripted and demo models free, and a `Price` that costs
every call exactly what genai-prices computes for it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from genai_prices import Usage, calc_price
from genai_prices.data_snapshot import get_snapshot

from app.engine.ports import FREE, Price, Rates, TokenUsage
from app.llm.model_prices import ModelPriceIn, parse_model_prices
from app.llm.models import ModelFactory
from app.llm.pricing import LOOKUPS_KEPT, ModelPrices, compile_price
from app.settings import Settings

USAGES = [
    (1000, 0, 100),
    (1000, 400, 100),
    (150_000, 20_000, 3000),
    (250_000, 100_000, 2000),  # past the usual 200k tier
    (1_500_000, 0, 10),
    (0, 0, 0),
]
"""(prompt, cached, completion) tokens, within and past every tier genai-prices knows."""


def genai_cost(model: str, prompt: int, cached: int, completion: int, **where: str) -> float:
    usage = Usage(input_tokens=prompt, cache_read_tokens=cached, output_tokens=completion)
    return float(calc_price(usage, model, **where).total_price)  # type: ignore[call-overload]


def test_every_text_price_genai_prices_knows_costs_a_call_what_it_computes() -> None:
    now = datetime.now(UTC)
    checked = 0
    for provider in get_snapshot().providers:
        for model in provider.models:
            price = compile_price(model.get_prices(now))
            if price is None:  # priced by characters, audio …: not a text chat price
                continue
            for prompt, cached, completion in USAGES:
                usage = Usage(
                    input_tokens=prompt, cache_read_tokens=cached, output_tokens=completion
                )
                theirs = model.calc_price(usage, provider, genai_request_timestamp=now)
                ours = price.cost(TokenUsage(prompt, completion, cached_tokens=cached))
                assert ours == pytest.approx(float(theirs.total_price), rel=1e-12, abs=1e-15), (
                    provider.id,
                    model.id,
                    (prompt, cached, completion),
                )
            checked += 1
    assert checked > 500  # the whole data set, not a handful


def test_a_model_is_priced_by_its_name_alone_at_an_endpoint_genai_prices_does_not_know() -> None:
    prices = ModelPrices(base_url="http://127.0.0.1:8000/v1")
    assert prices.provider is None
    price = prices.price("gpt-4o-mini")
    assert price is not None
    assert price.cost(TokenUsage(1234, 56, cached_tokens=200)) == pytest.approx(
        genai_cost("gpt-4o-mini", 1234, 200, 56), rel=1e-12
    )
    assert prices.price("llama-3-local-finetune") is None  # never a guess


def test_a_model_is_priced_by_the_provider_of_a_known_endpoint() -> None:
    prices = ModelPrices(base_url="https://openrouter.ai/api/v1")
    assert prices.provider == "openrouter"
    price = prices.price("openai/gpt-4o-mini")
    assert price is not None
    expected = genai_cost(
        "openai/gpt-4o-mini", 1000, 0, 100, provider_api_url="https://openrouter.ai/api/v1"
    )
    assert price.cost(TokenUsage(1000, 100)) == pytest.approx(expected, rel=1e-12)


def test_a_known_endpoint_prices_only_its_own_models() -> None:
    prices = ModelPrices(base_url="https://api.openai.com/v1")
    assert prices.provider == "openai"
    assert prices.price("gpt-4o-mini") is not None
    # an Anthropic model is priced by name alone elsewhere, but not at OpenAI's endpoint
    assert ModelPrices(base_url=None).price("claude-3-5-haiku-latest") is not None
    assert prices.price("claude-3-5-haiku-latest") is None


def test_model_prices_override_genai_prices_and_add_models() -> None:
    overrides = parse_model_prices(
        '{"gpt-4o-mini": {"input_per_mtok": 1, "output_per_mtok": 2, "cached_input_per_mtok": 0.1},'
        ' "my-llama": {"input_per_mtok": 0.5, "output_per_mtok": 1.5}}'
    )
    prices = ModelPrices(base_url="https://api.openai.com/v1", overrides=overrides)
    assert prices.price("gpt-4o-mini") == Price(Rates(1.0, 2.0, 0.1))
    assert prices.price("my-llama") == Price(Rates(0.5, 1.5, 0.5))  # cached at the input rate
    assert prices.price("GPT-4O-MINI") is not None  # genai-prices' match ignores case …
    assert prices.price("GPT-4O-MINI") != Price(Rates(1.0, 2.0, 0.1))  # … an override does not


def test_the_scripted_and_demo_models_cost_nothing_unless_priced() -> None:
    assert ModelPrices(base_url=None).price("scripted") == FREE
    assert ModelPrices(base_url=None).price("demo") == FREE
    overrides = {"scripted": ModelPriceIn(input_per_mtok=3, output_per_mtok=4)}
    assert ModelPrices(base_url=None, overrides=overrides).price("scripted") == Price(
        Rates(3.0, 4.0, 3.0)
    )


def test_lookups_are_remembered_per_model_name_within_a_bound() -> None:
    prices = ModelPrices(base_url=None)
    first = prices.price("gpt-4o-mini")
    assert prices.price("gpt-4o-mini") is first  # resolved once, the same value after
    for n in range(LOOKUPS_KEPT + 50):  # names a hostile client could send
        assert prices.price(f"no-such-model-{n}") is None
    assert len(prices._found) == LOOKUPS_KEPT


def test_a_price_file_is_read_with_at_path(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"m": {"input_per_mtok": 1, "output_per_mtok": 2}}))
    settings = Settings(_env_file=None, model_prices=f"@{path}")
    assert settings.model_prices["m"].price() == Price(Rates(1.0, 2.0, 1.0))


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("[1]", "must be a JSON object of model name -> price"),
        ("{", "invalid JSON"),
        ('{"m": {"input_per_mtok": -1, "output_per_mtok": 2}}', "model 'm': input_per_mtok"),
        ('{"m": {"input_per_mtok": 1}}', "model 'm': output_per_mtok: Field required"),
        ('{"m": {"input_per_mtok": 1, "output_per_mtok": 2, "cache": 1}}', "model 'm': cache"),
        ('{"m": {"input_per_mtok": "1", "output_per_mtok": 2}}', "model 'm': input_per_mtok"),
        ('{"m": {"input_per_mtok": NaN, "output_per_mtok": 2}}', "model 'm': input_per_mtok"),
        ('{" ": {"input_per_mtok": 1, "output_per_mtok": 2}}', "a model name is empty"),
        ("@/no/such/prices.json", "cannot read it"),
    ],
)
def test_a_bad_price_setting_stops_start_up_naming_the_problem(value: str, problem: str) -> None:
    with pytest.raises(ValueError, match="FINISHLINE_MODEL_PRICES") as raised:
        parse_model_prices(value)
    assert problem in str(raised.value)


def test_no_price_setting_is_no_override() -> None:
    assert parse_model_prices("") == {}
    assert Settings(_env_file=None).model_prices == {}


async def test_each_model_a_run_gets_carries_its_price() -> None:
    overrides = parse_model_prices('{"my-llama": {"input_per_mtok": 1, "output_per_mtok": 2}}')
    factory = ModelFactory(
        base_url="http://127.0.0.1:9/v1", api_key=None, default_model="x", prices=overrides
    )
    try:
        known, own, unknown = (factory.create(name) for name in ("gpt-4o-mini", "my-llama", "z"))
        assert known.price == ModelPrices(base_url=None).price("gpt-4o-mini")
        assert known.price is not None
        assert own.price == Price(Rates(1.0, 2.0, 1.0))
        assert unknown.price is None
        assert factory.create("scripted", [{"content": "hi"}]).price == FREE
        assert factory.create("demo").price == FREE
        assert factory.price("z") is None
    finally:
        await factory.aclose()
