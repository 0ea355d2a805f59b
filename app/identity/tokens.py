"""`TokenVerifier`: a bearer JWT checked with PyJWT against the issuer's keys, and the
`Caller` it stands for (DESIGN §23).

The checks, in order, each failure an `InvalidTokenError` naming its `TokenProblem`:
1. the header: a JWS in compact form, `alg` RS256 or ES256 (so `none`, every HMAC and
   anything else is refused before a key is looked at), `kid` a string if present;
2. the key: the issuer's key of that `kid` (`IssuerKeys`), whose own algorithm must be the
   header's (PyJWT binds a `PyJWK` to its algorithm and checks it again);
3. PyJWT's decode: the signature, then `exp` (required), `nbf` and `iat` with the leeway,
   `iss` equal to the issuer, `aud` holding the audience (both required); a short RSA key
   is refused;
4. the owner claim: a non-empty string (or a number), else the token is refused.

Scopes: the `scope` claim (space-separated, RFC 8693) or `scp` (a list or a string, as Okta
and Entra write it). A token with no `finishline:` scope may read and write; one with any is
held to those it carries. Admin: FINISHLINE_OIDC_ADMIN_CLAIM equal to, or a list holding,
FINISHLINE_OIDC_ADMIN_VALUE.

Verified tokens are remembered until their `exp` (plus the leeway) or until the issuer's keys
change, whichever is first, so a client that sends the same token on every request pays for
one signature check: a repeat costs a dict lookup by the token itself, less than an API key
check (bench/auth.py). The token is the key (a digest of 1-2 KB cost more than the rest of
the lookup): it is held in memory for no longer than it is valid, as the API keys are held.
At most `cache_size` are kept; the oldest goes first.
"""

from __future__ import annotations

import binascii
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt
from jwt import exceptions as jwt_errors
from jwt.utils import base64url_decode

from app.identity.caller import EVERY_ACCESS, Access, Caller, token_owner
from app.identity.errors import InvalidTokenError, TokenProblem
from app.identity.jwks import ALGORITHMS, IssuerKeys

CACHE_SIZE = 4096
KNOWN_ALGORITHMS = frozenset(
    {"none", "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512"}
    | {"PS256", "PS384", "PS512", "EdDSA", "ES256K"}
)
"""JOSE algorithm names a refusal may quote; any other is "an unknown algorithm" (the header
is the caller's: a message never repeats what it could not recognise)."""
MAX_OWNER_CHARS = 1024
MAX_TOKEN_CHARS = 16_384
"""A longer bearer value is refused before any decoding (providers' tokens are 1-2 KB)."""

_PYJWT_PROBLEMS: tuple[tuple[type[Exception], TokenProblem, str], ...] = (
    (jwt_errors.InvalidSignatureError, TokenProblem.SIGNATURE, "its signature does not verify"),
    (jwt_errors.ExpiredSignatureError, TokenProblem.EXPIRED, "has expired (exp)"),
    (jwt_errors.ImmatureSignatureError, TokenProblem.NOT_YET_VALID, "is not valid yet (nbf)"),
    (jwt_errors.InvalidAudienceError, TokenProblem.AUDIENCE, "its audience (aud) is not {aud}"),
    (jwt_errors.InvalidIssuerError, TokenProblem.ISSUER, "its issuer (iss) is not {iss}"),
    (jwt_errors.MissingRequiredClaimError, TokenProblem.CLAIMS, "has no {claim} claim"),
    (jwt_errors.InvalidAlgorithmError, TokenProblem.ALGORITHM, "its algorithm is not accepted"),
    (jwt_errors.InvalidKeyError, TokenProblem.SIGNATURE, "its key is too weak to trust"),
    (jwt_errors.InvalidIssuedAtError, TokenProblem.CLAIMS, "its iat claim is not a number"),
    (jwt_errors.DecodeError, TokenProblem.MALFORMED, "is malformed"),
    (jwt_errors.PyJWTError, TokenProblem.MALFORMED, "is malformed"),
)
"""PyJWT's exceptions, most specific first, as what the 401 says."""


@dataclass(frozen=True, slots=True)
class _Verified:
    caller: Caller
    until: float
    """The token's exp plus the leeway (epoch seconds)."""


class TokenVerifier:
    def __init__(
        self,
        keys: IssuerKeys,
        *,
        issuer: str,
        audience: str,
        owner_claim: str = "sub",
        admin_claim: str | None = None,
        admin_value: str | None = None,
        leeway_s: float = 30.0,
        cache_size: int = CACHE_SIZE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.keys = keys
        self.issuer = issuer
        self.audience = audience
        self.owner_claim = owner_claim
        self.admin_claim = admin_claim
        self.admin_value = admin_value
        self.leeway_s = leeway_s
        self.cache_size = cache_size
        self._clock = clock
        self._verified: dict[str, _Verified] = {}
        self._version = keys.version

    async def caller(self, token: str) -> Caller:
        """Who `token` stands for; `InvalidTokenError` (401), or `IssuerUnavailableError`
        (503) while the issuer's keys are not known."""
        if self._version != self.keys.version:
            self._verified.clear()
            self._version = self.keys.version
        seen = self._verified.get(token)
        if seen is not None:
            if self._clock() < seen.until:
                return seen.caller
            del self._verified[token]
        claims = await self._claims(token)
        caller = Caller(
            token_owner(self.issuer, self.owner_claim, self._owner_value(claims)),
            _grants(claims),
            admin=self._is_admin(claims),
        )
        if self.cache_size > 0 and self._version == self.keys.version:
            if len(self._verified) >= self.cache_size:
                del self._verified[next(iter(self._verified))]
            self._verified[token] = _Verified(caller, float(claims["exp"]) + self.leeway_s)
        return caller

    async def _claims(self, token: str) -> dict[str, Any]:
        header = _header(token)
        algorithm, kid = header.get("alg"), header.get("kid")
        if algorithm not in ALGORITHMS:
            named = algorithm if algorithm in KNOWN_ALGORITHMS else "an unknown algorithm"
            raise InvalidTokenError(
                TokenProblem.ALGORITHM,
                f"the token is signed with {named}; accepted: {', '.join(ALGORITHMS)}",
            )
        if kid is not None and not isinstance(kid, str):
            raise InvalidTokenError(TokenProblem.MALFORMED, "the token's kid is not a string")
        key = await self.keys.key(kid, algorithm)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": ["exp", "iss", "aud"], "enforce_minimum_key_length": True},
            )
        except jwt_errors.PyJWTError as exc:
            raise self._refusal(exc) from None
        return claims

    def _refusal(self, exc: Exception) -> InvalidTokenError:
        for kind, problem, text in _PYJWT_PROBLEMS:
            if isinstance(exc, kind):
                claim = getattr(exc, "claim", "a required")
                said = text.format(aud=self.audience, iss=self.issuer, claim=claim)
                subject = "the token's" if said.startswith("its ") else "the token"
                return InvalidTokenError(problem, f"{subject} {said.removeprefix('its ')}")
        raise AssertionError("PyJWTError is the last entry")  # pragma: no cover

    def _owner_value(self, claims: dict[str, Any]) -> str:
        value = claims.get(self.owner_claim)
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not value or len(value) > MAX_OWNER_CHARS:
            raise InvalidTokenError(
                TokenProblem.CLAIMS,
                f"the token's {self.owner_claim} claim (FINISHLINE_OIDC_OWNER_CLAIM) is "
                "missing, empty or not a string",
            )
        return value

    def _is_admin(self, claims: dict[str, Any]) -> bool:
        if self.admin_claim is None:
            return False
        held = claims.get(self.admin_claim)
        return held == self.admin_value or (isinstance(held, list) and self.admin_value in held)


def _header(token: str) -> dict[str, Any]:
    """The token's JOSE header, read to pick the key (PyJWT's decode reads it again, checked).
    Only the first segment is decoded: PyJWT's `get_unverified_header` checks all three, which
    was a third of a first check's time."""
    malformed = InvalidTokenError(
        TokenProblem.MALFORMED, "the token is malformed: not a signed JWT (JWS)"
    )
    if len(token) > MAX_TOKEN_CHARS:
        raise InvalidTokenError(
            TokenProblem.MALFORMED, f"the token is longer than {MAX_TOKEN_CHARS:,} characters"
        )
    try:
        header = json.loads(base64url_decode(token.partition(".")[0]))
    except (ValueError, TypeError, binascii.Error):
        raise malformed from None
    if not isinstance(header, dict):
        raise malformed
    return header


def _grants(claims: dict[str, Any]) -> frozenset[Access]:
    """What the token's `finishline:` scopes grant: everything when it carries none."""
    scopes: list[Any] = []
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            value = value.split()
        scopes += value if isinstance(value, list) else []
    ours = {s for s in scopes if isinstance(s, str) and s.startswith("finishline:")}
    if not ours:
        return EVERY_ACCESS
    return frozenset(access for access in Access if access.value in ours)
