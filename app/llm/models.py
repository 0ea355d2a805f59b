"""Which model a run gets, by name: the configured OpenAI-compatible endpoint, `demo`, or
`scripted`, each with its price (app.llm.pricing). Endpoint models share a few HTTP clients
(connections are kept alive across runs), runs spread over them in turn."""

from __future__ import annotations

import importlib
import ssl
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from app.engine.errors import FinishlineError
from app.engine.ports import ChatModel, Price
from app.llm.demo import DemoModel
from app.llm.model_prices import ModelPriceIn
from app.llm.openai import DEFAULT_MAX_RESPONSE_BYTES, OpenAIChatModel
from app.llm.pricing import ModelPrices
from app.llm.scripted import ScriptedModel
from app.propagation import propagate

DEMO = "demo"
SCRIPTED = "scripted"
OPENAI_BASE_URL = "https://api.openai.com/v1"
CLIENTS = 16
CLIENT_LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=64)
"""Connections of each shared client: 16 × 64 serve a thousand concurrent runs, all kept
alive. (The shards date from httpcore's pool, which polled every connection it held on each
request; the aiohttp pool of `app.http_transport` does not, and costs the same either way.)"""


class ModelUnavailableError(FinishlineError, ValueError):
    """The request names a model this server cannot provide."""


class ModelFactory:
    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        default_model: str,
        scripted_enabled: bool = True,
        demo_delay_s: float = 0.3,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        prices: Mapping[str, ModelPriceIn] | None = None,
    ) -> None:
        """`prices`: FINISHLINE_MODEL_PRICES, over genai-prices' for the endpoint."""
        if base_url is None and api_key is not None:
            base_url = OPENAI_BASE_URL
        self.prices = ModelPrices(base_url=base_url, overrides=prices)
        self.base_url = base_url
        self.api_key = api_key
        self.default_model = default_model if base_url is not None else DEMO
        self.scripted_enabled = scripted_enabled
        self.demo_delay_s = demo_delay_s
        self.max_response_bytes = max_response_bytes
        self._clients: dict[int, httpx.AsyncClient] = {}
        self._unforced: set[str] = set()
        """Models whose endpoint refused `tool_choice` (app.llm.openai), for this process."""
        self._unstructured: set[str] = set()
        """Models whose endpoint refused `response_format: json_schema`, for this process."""
        self._ssl: ssl.SSLContext | None = None
        self._created = 0
        if base_url is not None:  # aiohttp (~130 ms of imports) only where an endpoint is set
            importlib.import_module("app.http_transport")

    def resolve(self, name: str | None, *, has_script: bool) -> str:
        """The model a request gets; ModelUnavailableError says why it cannot have it."""
        name = name or self.default_model
        if name == SCRIPTED:
            if not self.scripted_enabled:
                raise ModelUnavailableError("the scripted model is disabled on this server")
            if not has_script:
                raise ModelUnavailableError("model 'scripted' needs a model_script")
            return name
        if has_script:
            raise ModelUnavailableError("model_script is only used with model 'scripted'")
        if name != DEMO and self.base_url is None:
            raise ModelUnavailableError(
                f"no LLM endpoint is configured, so model {name!r} is unavailable: use 'demo' "
                "or 'scripted', or set FINISHLINE_LLM_BASE_URL"
            )
        return name

    def price(self, name: str) -> Price | None:
        """What a run of model `name` starting now pays; None when no price is known."""
        return self.prices.price(name)

    def create(
        self, name: str, script: Sequence[Mapping[str, Any]] | None = None, start: int = 0
    ) -> ChatModel:
        """`start`: LLM calls the run made before it resumed (the scripted model skips them).
        Called once per run: the model's price is resolved here, for the whole run."""
        price = self.prices.price(name)
        if name == SCRIPTED:
            return ScriptedModel(list(script or ()), start, price=price)
        if name == DEMO:
            return DemoModel(delay_s=self.demo_delay_s, price=price)
        assert self.base_url is not None
        self._created += 1
        shard = self._created % CLIENTS
        client = self._clients.get(shard)
        if client is None:
            from app.http_transport import AiohttpTransport  # imported by __init__

            if self._ssl is None:  # one context for all clients: loading CAs takes ~20 ms
                self._ssl = httpx.create_ssl_context()
            client = self._clients[shard] = httpx.AsyncClient(
                transport=AiohttpTransport(
                    limits=CLIENT_LIMITS, ssl_context=self._ssl, trust_env=True
                ),
                timeout=httpx.Timeout(300.0, connect=10.0),
                event_hooks={"request": [propagate]},
            )
        return OpenAIChatModel(
            base_url=self.base_url,
            model=name,
            api_key=self.api_key,
            client=client,
            max_response_bytes=self.max_response_bytes,
            price=price,
            unforced=self._unforced,
            unstructured=self._unstructured,
        )

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
