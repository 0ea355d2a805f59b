"""What a model's calls cost: its `Price` (app.engine.ports), resolved once per run.

Prices come from `genai-prices` (offline price data by provider and model, the data Pydantic
AI uses): by provider when the endpoint's base URL is one it knows (api.openai.com,
openrouter.ai, api.groq.com …), else by the model name alone (a self-hosted or proxied
endpoint serving `gpt-4o-mini`). `FINISHLINE_MODEL_PRICES` (JSON, or `@path` naming a JSON
file) overrides or adds models by the exact name a run uses:
`{"MODEL": {"input_per_mtok": USD, "output_per_mtok": USD, "cached_input_per_mtok"?: USD}}`
(cached input at the input rate when omitted). The scripted and demo models cost 0 unless
named there. A model found nowhere has no price (None): its calls' cost is null, never a guess.

genai-prices (its data and, through it, an HTTP client) is imported only when a price is
looked up, or when the factory serves an endpoint (whose runs are priced): a server on the
demo model alone never loads it.

The price in force when the run starts is the run's (genai-prices knows prices that change
by date or hour); tiered prices (a higher rate past a prompt size) are kept as tiers. Looking
a model up costs tens of microseconds and is remembered per model name (the last
`LOOKUPS_KEPT`); pricing a call is then a few multiplications in the engine.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from app.engine.ports import FREE, Price, Rates
from app.llm.model_prices import ModelPriceIn

if TYPE_CHECKING:
    from genai_prices.data_snapshot import DataSnapshot
    from genai_prices.types import ModelInfo, ModelPrice, Provider

LOOKUPS_KEPT = 1024
"""Model names whose look-up is remembered (run requests name models: a bound, not a leak)."""

FREE_MODELS = ("scripted", "demo")


class ModelPrices:
    """The price of each model a run may name, at the endpoint of `base_url`."""

    def __init__(
        self,
        *,
        base_url: str | None,
        overrides: Mapping[str, ModelPriceIn] | None = None,
        free: Collection[str] = FREE_MODELS,
    ) -> None:
        self.overrides = {name: spec.price() for name, spec in (overrides or {}).items()}
        self.free = frozenset(free)
        self._base_url = base_url
        self._data: tuple[list[Provider], Provider | None] | None = None
        """genai-prices' providers, and the one it knows at `base_url` (its models only)."""
        if base_url is not None:  # an endpoint's runs are priced: load the data now
            self._providers()
        self._found: OrderedDict[str, ModelInfo | None] = OrderedDict()
        self._compiled: dict[int, tuple[ModelPrice, Price | None]] = {}

    @property
    def provider(self) -> str | None:
        """The id of the endpoint's provider, when genai-prices knows its URL."""
        endpoint = self._providers()[1]
        return endpoint.id if endpoint is not None else None

    def _providers(self) -> tuple[list[Provider], Provider | None]:
        if self._data is None:
            from genai_prices.data_snapshot import get_snapshot

            snapshot = get_snapshot()
            self._data = (snapshot.providers, _endpoint_provider(snapshot, self._base_url))
        return self._data

    def price(self, model: str) -> Price | None:
        """`model`'s price for a run starting now; None when it has none known."""
        override = self.overrides.get(model)
        if override is not None:
            return override
        if model in self.free:
            return FREE
        info = self._model_info(model)
        if info is None:
            return None
        prices = info.get_prices(datetime.now(UTC))
        compiled = self._compiled.get(id(prices))
        if compiled is None or compiled[0] is not prices:
            compiled = self._compiled[id(prices)] = (prices, compile_price(prices))
        return compiled[1]

    def _model_info(self, model: str) -> ModelInfo | None:
        found = self._found
        if model in found:
            found.move_to_end(model)
            return found[model]
        info = self._lookup(model.lower())
        found[model] = info
        if len(found) > LOOKUPS_KEPT:
            found.popitem(last=False)
        return info

    def _lookup(self, ref: str) -> ModelInfo | None:
        # genai-prices' own find_provider_model remembers every name it is asked about, found
        # or not, without bound; run requests name models, so this asks the data directly
        providers, provider = self._providers()
        if provider is None:  # by name alone: the first provider whose models it looks like
            for candidate in providers:
                match = candidate.model_match
                if match is not None and match.is_match(ref):
                    provider = candidate
                    break
            else:
                return None
        return provider.find_model(ref, all_providers=providers)


def _endpoint_provider(snapshot: DataSnapshot, base_url: str | None) -> Provider | None:
    if base_url is None:
        return None
    try:
        return snapshot.find_provider(None, None, base_url)
    except LookupError:
        return None


PER_MTOK = {"input_mtok", "output_mtok", "cache_read_mtok"}


def compile_price(prices: ModelPrice) -> Price | None:
    """genai-prices' `ModelPrice` as our `Price`: input, output and cached input per million
    tokens and the per-request fee, each maybe tiered by the prompt's size. None when it
    prices input or output tokens by another measure (characters, audio): not a text price."""
    from genai_prices.types import TieredPrices  # loaded already: `prices` is its data

    values = {key: getattr(prices, key) for key in (*PER_MTOK, "requests_kcount")}
    if values["input_mtok"] is None or values["output_mtok"] is None:
        return None
    starts = sorted(
        {tier.start for v in values.values() if isinstance(v, TieredPrices) for tier in v.tiers}
    )

    def rates(prompt_tokens: int) -> Rates:
        def rate(key: str) -> float:
            value = values[key]
            if isinstance(value, TieredPrices):
                chosen = value.base
                for tier in value.tiers:
                    if prompt_tokens > tier.start:
                        chosen = tier.price
                return _usd(chosen)
            return _usd(value) if isinstance(value, Decimal) else 0.0

        cached = "cache_read_mtok" if values["cache_read_mtok"] is not None else "input_mtok"
        return Rates(
            rate("input_mtok"), rate("output_mtok"), rate(cached), rate("requests_kcount") / 1000
        )

    return Price(rates(0), tuple((start, rates(start + 1)) for start in starts))


def _usd(value: Decimal) -> float:
    usd = float(value)
    if not math.isfinite(usd) or usd < 0:
        raise ValueError(f"genai-prices gave a price of {value}")
    return usd
