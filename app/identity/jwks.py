"""`IssuerKeys`: the issuer's signing keys (its JWKS), cached, refreshed within bounds.

- **Loaded in the background.** `run()` (a task of the app's lifespan) fetches discovery and
  the JWKS, retrying with backoff (0.5 s doubling, at most `refresh_s` apart) while the issuer
  cannot be reached, then again every `max_age_s` so a withdrawn key stops being accepted.
  Start-up never waits for it; until the first load, `key()` raises `IssuerUnavailableError`
  (503, naming why) at once. A failed later refresh keeps the keys already held.
- **An unknown `kid` refreshes at most once per `refresh_s`.** The first token naming a key
  not held fetches the JWKS again (a rotation is seen without a restart); every other within
  the interval, however many and whatever they name, is refused without a fetch. Concurrent
  requests share the one fetch (a lock), then look again.
- **Only keys for RS256 and ES256 are kept**: RSA of 2048 bits or more, EC on P-256, `use`
  absent or `sig`, `alg` absent or matching. A symmetric (`oct`) key is never taken from a
  JWKS, so no token can be checked with HMAC over a public key.

`version` grows whenever the held keys change, so whoever caches what a key verified can drop
it then.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from jwt import PyJWK
from jwt.exceptions import PyJWTError

from app.identity.discovery import IssuerDocuments, IssuerFetchError
from app.identity.errors import InvalidTokenError, IssuerUnavailableError, TokenProblem

log = structlog.get_logger("finishline.identity")

ALGORITHMS = ("RS256", "ES256")
"""The JWS algorithms a token may be signed with."""
_KEY_TYPES = {"RS256": ("RSA", None), "ES256": ("EC", "P-256")}
MIN_RSA_BITS = 2048
FIRST_RETRY_S = 0.5
MAX_KEYS = 100
"""Keys read from one JWKS at most (providers publish two or three)."""


def usable_keys(jwks: dict[str, Any]) -> tuple[dict[str | None, PyJWK], str]:
    """The RS256/ES256 signing keys of a JWKS by key id (a key without one: None), and a
    fingerprint of them (equal for equal keys)."""
    found: dict[str | None, PyJWK] = {}
    used: list[dict[str, Any]] = []
    for jwk in jwks.get("keys", [])[:MAX_KEYS]:
        if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
            continue
        algorithm = _algorithm_of(jwk)
        kid = jwk.get("kid")
        if algorithm is None or not (kid is None or isinstance(kid, str)):
            continue
        try:
            key = PyJWK(jwk, algorithm)
        except (PyJWTError, ValueError, TypeError):  # the provider's data: skipped, not fatal
            continue
        if algorithm == "RS256" and key.key.key_size < MIN_RSA_BITS:
            continue
        found[kid] = key
        used.append(jwk)
    return found, json.dumps(used, sort_keys=True)


def _algorithm_of(jwk: dict[str, Any]) -> str | None:
    for algorithm, (kty, curve) in _KEY_TYPES.items():
        if jwk.get("kty") == kty and jwk.get("crv") == curve:
            return algorithm if jwk.get("alg", algorithm) == algorithm else None
    return None


class IssuerKeys:
    def __init__(
        self,
        documents: IssuerDocuments,
        *,
        refresh_s: float,
        max_age_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.documents = documents
        self.refresh_s = refresh_s
        self.max_age_s = max_age_s
        self._clock = clock
        self._sleep = sleep
        self._keys: dict[str | None, PyJWK] | None = None
        self._fingerprint = ""
        self._jwks_uri: str | None = None
        self._failure = "the first fetch has not finished"
        self._next_try = clock()
        self._forced_at: float | None = None
        self._lock = asyncio.Lock()
        self.ready = asyncio.Event()
        """Set once keys are held (they stay held from then on)."""
        self.version = 0

    @property
    def loaded(self) -> bool:
        return self._keys is not None

    def accept(self, jwks: dict[str, Any]) -> None:
        """Hold the usable keys of `jwks` (none usable: `IssuerFetchError`)."""
        keys, fingerprint = usable_keys(jwks)
        if not keys:
            raise IssuerFetchError("the issuer's JWKS holds no RS256 or ES256 signing key")
        if fingerprint != self._fingerprint:
            self.version += 1
            log.info("oidc_keys_loaded", keys=len(keys), version=self.version)
        self._keys, self._fingerprint = keys, fingerprint
        self.ready.set()

    async def key(self, kid: str | None, algorithm: str) -> PyJWK:
        """The key a token with header `kid` and `alg` is checked with, its algorithm bound."""
        key = await self._find_or_refresh(kid)
        if key.algorithm_name != algorithm:
            raise InvalidTokenError(
                TokenProblem.ALGORITHM,
                f"the token's algorithm is not its key's ({key.algorithm_name})",
            )
        return key

    async def _find_or_refresh(self, kid: str | None) -> PyJWK:
        found = self._find(kid)
        if found is not None:
            return found
        if self._keys is None:
            wait = max(1, math.ceil(self._next_try - self._clock()))
            raise IssuerUnavailableError(self._failure, retry_after_s=wait)
        async with self._lock:
            found = self._find(kid)  # a refresh that ran meanwhile may have brought it
            if found is not None:
                return found
            now = self._clock()
            if self._forced_at is None or now - self._forced_at >= self.refresh_s:
                self._forced_at = now
                await self._load(rediscover=False)
                found = self._find(kid)
                if found is not None:
                    return found
        raise InvalidTokenError(
            TokenProblem.UNKNOWN_KEY,
            "the token's key id (kid) is none of the issuer's keys"
            if kid is not None
            else "the token names no key id (kid) and the issuer has several keys",
        )

    def _find(self, kid: str | None) -> PyJWK | None:
        keys = self._keys
        if keys is None:
            return None
        if kid is None and len(keys) == 1:
            return next(iter(keys.values()))
        return keys.get(kid)

    async def refresh(self, *, rediscover: bool = True) -> bool:
        """Fetch the keys again now (under the lock); whether it worked."""
        async with self._lock:
            return await self._load(rediscover=rediscover)

    async def _load(self, *, rediscover: bool) -> bool:
        try:
            if rediscover or self._jwks_uri is None:
                self._jwks_uri = await self.documents.jwks_uri()
            self.accept(await self.documents.jwks(self._jwks_uri))
        except IssuerFetchError as exc:
            self._failure = str(exc)
            log.warning("oidc_keys_fetch_failed", error=self._failure, held=self.loaded)
            return False
        return True

    async def run(self) -> None:
        """Load the keys, retrying until it works, then refresh them every `max_age_s`."""
        delay = FIRST_RETRY_S
        while True:
            if await self.refresh():
                delay, wait = FIRST_RETRY_S, self.max_age_s
            else:
                wait = min(delay, self.refresh_s) if self._keys is None else self.refresh_s
                delay *= 2
            self._next_try = self._clock() + wait
            await self._sleep(wait)
