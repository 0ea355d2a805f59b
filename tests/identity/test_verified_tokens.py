"""A verified token is remembered (so a client sending it on every request pays for one
signature check) only until its exp plus the leeway, or until the issuer's keys change, and
at most `cache_size` of them."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from jwt import PyJWK

from app.identity.discovery import IssuerDocuments
from app.identity.jwks import IssuerKeys
from app.identity.tokens import TokenVerifier
from tests.fakes.oidc_issuer import AUDIENCE, FakeIssuer


class CountingKeys(IssuerKeys):
    """The issuer's keys, counting how often a token's key is looked up (once per check that
    verifies a signature)."""

    lookups = 0

    async def key(self, kid: str | None, algorithm: str) -> PyJWK:
        self.lookups += 1
        return await super().key(kid, algorithm)


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def verifier(
    issuer: FakeIssuer, clock: Clock, cache_size: int = 4096
) -> AsyncIterator[TokenVerifier]:
    keys = CountingKeys(IssuerDocuments(issuer.issuer), refresh_s=60, max_age_s=3600)
    await keys.refresh()
    try:
        yield TokenVerifier(
            keys,
            issuer=issuer.issuer,
            audience=AUDIENCE,
            leeway_s=30,
            cache_size=cache_size,
            clock=clock,
        )
    finally:
        await keys.documents.aclose()


async def test_a_token_sent_again_is_not_verified_again_until_it_expires() -> None:
    clock = Clock()
    async with FakeIssuer() as issuer, verifier(issuer, clock) as tokens:
        exp = int(clock.now) + 300
        token = issuer.token(sub="alice", exp=exp)
        callers = [await tokens.caller(token) for _ in range(5)]
        once = tokens.keys.lookups  # type: ignore[attr-defined]
        clock.now = exp + 30  # past exp plus the leeway: checked again (valid in real time)
        await tokens.caller(token)

    assert len({c.owner for c in callers}) == 1
    assert once == 1
    assert tokens.keys.lookups == 2  # type: ignore[attr-defined]


async def test_a_change_of_the_issuers_keys_forgets_what_was_verified() -> None:
    clock = Clock()
    async with FakeIssuer() as issuer, verifier(issuer, clock) as tokens:
        token = issuer.token(sub="alice")
        await tokens.caller(token)
        issuer.rotate()
        await tokens.keys.refresh()
        await tokens.caller(token)

    assert tokens.keys.lookups == 2  # type: ignore[attr-defined]


async def test_at_most_cache_size_tokens_are_remembered_the_oldest_dropped() -> None:
    clock = Clock()
    async with FakeIssuer() as issuer, verifier(issuer, clock, cache_size=2) as tokens:
        first, second, third = (issuer.token(sub=name) for name in ("a", "b", "c"))
        for token in (first, second, third, third, second):
            await tokens.caller(token)
        remembered = len(tokens._verified)
        await tokens.caller(first)

    assert remembered == 2
    assert tokens.keys.lookups == 4  # type: ignore[attr-defined]
