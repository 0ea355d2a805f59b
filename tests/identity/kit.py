"""What the identity tests share: the service set to trust a `FakeIssuer`, and bearer headers.

    async with FakeIssuer() as issuer, oidc_client(issuer) as client:
        response = await client.get("/runs", headers=bearer(issuer.token(sub="alice")))

`oidc_client` waits until the service holds the issuer's keys (they load in the background:
start-up does not wait), on the keys' own event, under a bound.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx

from app.main import create_app
from app.settings import Settings
from tests.api.kit import _StateTap as StateTap
from tests.api.kit import app_with_state, settings
from tests.fakes.oidc_issuer import AUDIENCE, FakeIssuer
from tests.fakes.serving import Served

KEY = "key-of-the-ops-team"
"""An API key, accepted beside the issuer's tokens."""


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def oidc_settings(issuer: FakeIssuer, **overrides: Any) -> Settings:
    return settings(
        **{
            "oidc_issuer": issuer.issuer,
            "oidc_audience": AUDIENCE,
            "api_keys": [KEY],
            **overrides,
        }
    )


async def keys_loaded(state: MutableMapping[str, Any], timeout_s: float = 10) -> None:
    """Until the service holds the issuer's keys (its background load is done)."""
    with anyio.fail_after(timeout_s):
        await state["authenticator"].tokens.keys.ready.wait()


@asynccontextmanager
async def oidc_client(
    issuer: FakeIssuer, *, wait: bool = True, **overrides: Any
) -> AsyncIterator[httpx.AsyncClient]:
    async with oidc_app(issuer, wait=wait, **overrides) as (client, _):
        yield client


@asynccontextmanager
async def oidc_app(
    issuer: FakeIssuer, *, wait: bool = True, **overrides: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, MutableMapping[str, Any]]]:
    async with app_with_state(oidc_settings(issuer, **overrides)) as (client, state):
        if wait:
            await keys_loaded(state)
        yield client, state


@asynccontextmanager
async def served_oidc_app(app_settings: Settings) -> AsyncIterator[Served]:
    """The app served by uvicorn on loopback (for the CLI and the browser), once it holds
    the issuer's keys."""
    tap = StateTap(create_app(app_settings))
    async with Served(tap, lifespan="on") as server:
        await keys_loaded(tap.state)
        yield server
