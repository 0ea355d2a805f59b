"""`IssuerKeys` against a real issuer on loopback: discovery, the JWKS, which keys are kept,
refreshes bounded per interval (a flood of made-up kids cannot make it fetch in a loop), the
background load's retries, and why it says it failed. Time is a clock the test moves."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from app.identity.discovery import IssuerDocuments
from app.identity.errors import InvalidTokenError, IssuerUnavailableError, TokenProblem
from app.identity.jwks import IssuerKeys, usable_keys
from tests.fakes.oidc_issuer import FakeIssuer, b64, ec_key, public_jwk, rsa_key

REFRESH_S = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def keys_of(issuer: FakeIssuer | str, clock: Clock | None = None, **kw: Any) -> IssuerKeys:
    url = issuer if isinstance(issuer, str) else issuer.issuer
    return IssuerKeys(
        IssuerDocuments(url, **kw),
        refresh_s=REFRESH_S,
        max_age_s=3600,
        clock=clock or Clock(),
    )


async def test_keys_come_from_the_jwks_the_discovery_document_names() -> None:
    async with FakeIssuer() as issuer:
        keys = keys_of(issuer)
        assert await keys.refresh()
        rsa = await keys.key(issuer.rsa_kid, "RS256")
        ec = await keys.key(issuer.ec_kid, "ES256")
        await keys.documents.aclose()

    assert (issuer.discovery_requests, issuer.jwks_requests) == (1, 1)
    assert (rsa.algorithm_name, ec.algorithm_name) == ("RS256", "ES256")


async def test_a_flood_of_unknown_kids_fetches_the_jwks_once_per_interval() -> None:
    clock = Clock()
    async with FakeIssuer() as issuer:
        keys = keys_of(issuer, clock)
        await keys.refresh()

        async def unknown(kid: str) -> TokenProblem:
            with pytest.raises(InvalidTokenError) as refused:
                await keys.key(kid, "RS256")
            return refused.value.problem

        at_once = await asyncio.gather(*(unknown(f"made-up-{n}") for n in range(200)))
        one_by_one = [await unknown(f"again-{n}") for n in range(100)]
        after_flood = issuer.jwks_requests
        clock.now += REFRESH_S - 1
        await unknown("still-within")
        within = issuer.jwks_requests
        clock.now += 1
        await unknown("next-interval")
        await unknown("next-interval-too")
        await keys.documents.aclose()

    assert set(at_once) == set(one_by_one) == {TokenProblem.UNKNOWN_KEY}
    assert after_flood == 2  # the load, then one refresh for the whole flood
    assert within == 2
    assert issuer.jwks_requests == 3


async def test_a_rotated_key_is_fetched_on_its_first_token_within_the_bound() -> None:
    clock = Clock()
    async with FakeIssuer() as issuer:
        keys = keys_of(issuer, clock)
        await keys.refresh()
        new = issuer.rotate()
        found = await keys.key(new, "RS256")  # the first unknown kid: fetched at once
        newer = issuer.rotate()
        with pytest.raises(InvalidTokenError):  # a second rotation within the interval
            await keys.key(newer, "RS256")
        clock.now += REFRESH_S
        newest = await keys.key(newer, "RS256")
        await keys.documents.aclose()

    assert found.key_id == new
    assert newest.key_id == newer
    assert issuer.jwks_requests == 3


async def test_a_withdrawn_key_stops_working_at_the_next_refresh() -> None:
    async with FakeIssuer() as issuer:
        keys = keys_of(issuer)
        await keys.refresh()
        old = issuer.rsa_kid
        await keys.key(old, "RS256")
        version = keys.version
        issuer.rotate()
        issuer.withdraw(old)
        await keys.refresh()
        with pytest.raises(InvalidTokenError) as refused:
            await keys.key(old, "RS256")
        await keys.documents.aclose()

    assert refused.value.problem is TokenProblem.UNKNOWN_KEY
    assert keys.version == version + 1


async def test_until_the_first_load_tokens_get_unavailable_naming_why() -> None:
    async with FakeIssuer() as issuer:
        issuer.down = True
        keys = keys_of(issuer)
        assert not await keys.refresh()
        with pytest.raises(IssuerUnavailableError) as unavailable:
            await keys.key(issuer.rsa_kid, "RS256")
        issuer.down = False
        assert await keys.refresh()
        await keys.key(issuer.rsa_kid, "RS256")
        await keys.documents.aclose()

    assert "openid-configuration answered HTTP 503" in unavailable.value.why
    assert "API keys still work" in unavailable.value.message


async def test_an_issuer_that_refuses_connections_is_named_as_such() -> None:
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        keys = keys_of(f"http://127.0.0.1:{closed.getsockname()[1]}/realms/x")
        assert not await keys.refresh()
        with pytest.raises(IssuerUnavailableError) as unavailable:
            await keys.key("any", "RS256")
        await keys.documents.aclose()

    assert "could not connect to 127.0.0.1" in unavailable.value.why


async def test_a_failed_refresh_keeps_the_keys_already_held() -> None:
    async with FakeIssuer() as issuer:
        keys = keys_of(issuer)
        await keys.refresh()
        issuer.down = True
        assert not await keys.refresh()
        key = await keys.key(issuer.rsa_kid, "RS256")
        await keys.documents.aclose()

    assert key.key_id == issuer.rsa_kid


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"discovery_issuer": "https://impostor.test/realms/test"}, "names another issuer"),
        ({"jwks_uri": "http://keys.example.com/certs"}, "jwks_uri: 'http://keys.example.com"),
        ({"jwks_uri": "https://keys.example.com/certs?x=1"}, "has a query"),
    ],
)
async def test_a_discovery_document_that_cannot_be_trusted_is_refused(
    change: dict[str, str], says: str
) -> None:
    async with FakeIssuer() as issuer:
        for name, value in change.items():
            setattr(issuer, name, value)
        keys = keys_of(issuer)
        assert not await keys.refresh()
        with pytest.raises(IssuerUnavailableError) as unavailable:
            await keys.key(issuer.rsa_kid, "RS256")
        await keys.documents.aclose()

    assert says in unavailable.value.why
    assert issuer.jwks_requests == 0


async def test_a_jwks_over_the_size_cap_is_not_read() -> None:
    async with FakeIssuer() as issuer:
        issuer.extra_jwks = [{"kty": "oct", "k": "x" * 20_000}]
        keys = keys_of(issuer, max_bytes=10_000)
        assert not await keys.refresh()
        with pytest.raises(IssuerUnavailableError) as unavailable:
            await keys.key(issuer.rsa_kid, "RS256")
        await keys.documents.aclose()

    assert "larger than 10,000 bytes" in unavailable.value.why


def test_only_rs256_and_es256_signing_keys_are_kept() -> None:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    short = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    p384 = ec.generate_private_key(ec.SECP384R1())
    jwks = {
        "keys": [
            public_jwk(rsa_key(0), "good-rsa"),
            public_jwk(ec_key(0), "good-ec", alg="ES256"),
            {"kty": "oct", "k": b64(b"a shared secret"), "kid": "hmac", "alg": "HS256"},
            public_jwk(short, "short-rsa"),
            public_jwk(p384, "p384"),
            public_jwk(rsa_key(1), "encryption", use="enc"),
            public_jwk(rsa_key(2), "ps256", alg="PS256"),
            public_jwk(rsa_key(3), "kid-not-a-string") | {"kid": 7},
            "not a key",
        ]
    }

    keys, _ = usable_keys(jwks)

    assert sorted(k or "" for k in keys) == ["good-ec", "good-rsa"]


async def test_the_loader_retries_with_backoff_then_refreshes_at_the_max_age() -> None:
    waits: list[float] = []

    class Stop(Exception):
        pass

    async with FakeIssuer() as issuer:
        issuer.down = True

        async def sleep(seconds: float) -> None:
            waits.append(seconds)
            if len(waits) == 4:
                issuer.down = False
            if len(waits) == 6:
                raise Stop

        keys = IssuerKeys(IssuerDocuments(issuer.issuer), refresh_s=1.5, max_age_s=900, sleep=sleep)
        with pytest.raises(Stop):
            await keys.run()
        await keys.documents.aclose()

    assert waits == [0.5, 1.0, 1.5, 1.5, 900, 900]
    assert keys.loaded
