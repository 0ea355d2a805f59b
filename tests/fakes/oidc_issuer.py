"""A real OIDC issuer for the tests, served over HTTP on 127.0.0.1: its discovery document,
its JWKS (an RSA and an EC key of its own, made with `cryptography`), key rotation, and the
access tokens it signs (with PyJWT), good ones and every kind of bad one.

    async with FakeIssuer() as issuer:
        settings(oidc_issuer=issuer.issuer, oidc_audience=AUDIENCE)
        token = issuer.token(sub="alice", org_id="acme")            # RS256, valid 5 min
        token = issuer.token(sub="bob", alg="ES256", scope="finishline:read")
        issuer.rotate()                  # a new RSA key signs from now on, both published
        issuer.withdraw(old_kid)         # no longer in the JWKS
        issuer.down = True               # every request answers 503 until set back
        issuer.jwks_requests             # how many times the JWKS was fetched

Its issuer URL has a path (`/realms/test`, as Keycloak's have), so discovery at
`{issuer}/.well-known/openid-configuration` is checked to be built from the whole URL.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import hmac
import json
import time
from typing import Any, Self

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.serving import Served

AUDIENCE = "https://finishline.test/api"
REALM = "/realms/test"
JWKS_PATH = REALM + "/protocol/openid-connect/certs"


@functools.cache
def rsa_key(n: int) -> rsa.RSAPrivateKey:
    """The n-th RSA key of the test session (2048 bits: made once each, ~0.1 s)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@functools.cache
def ec_key(n: int) -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def public_jwk(key: Any, kid: str, **extra: Any) -> dict[str, Any]:
    """The public JWK of a private RSA or EC key."""
    algorithm = RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else ECAlgorithm
    jwk: dict[str, Any] = algorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "use": "sig", **extra}


class FakeIssuer:
    def __init__(self, *, audience: str = AUDIENCE) -> None:
        self.audience = audience
        self.signing: dict[str, tuple[str, Any]] = {}
        """kid -> (algorithm, private key) of every key it can sign with."""
        self.published: list[str] = []
        """The kids its JWKS lists, in order."""
        self.extra_jwks: list[dict[str, Any]] = []
        """More JWKs listed as they are (keys the service must ignore)."""
        self.jwks_requests = 0
        self.discovery_requests = 0
        self._requested = asyncio.Event()
        self.down = False
        self.discovery_issuer: str | None = None
        """What the discovery document says the issuer is (None: the truth)."""
        self.jwks_uri: str | None = None
        """What the discovery document says the JWKS is at (None: its own)."""
        self._rsa_made = 0
        self.rsa_kid = self._add("RS256", rsa_key(0))
        self.ec_kid = self._add("ES256", ec_key(0))
        self._server = Served(
            Starlette(
                routes=[
                    Route(REALM + "/.well-known/openid-configuration", self._discovery),
                    Route(JWKS_PATH, self._jwks),
                ]
            )
        )

    @property
    def issuer(self) -> str:
        return self._server.url(REALM)

    async def __aenter__(self) -> Self:
        await self._server.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._server.__aexit__(*exc_info)

    # -- keys ---------------------------------------------------------------------------------

    def _add(self, algorithm: str, key: Any) -> str:
        kid = f"{algorithm.lower()}-{len(self.signing) + 1}"
        self.signing[kid] = (algorithm, key)
        self.published.append(kid)
        return kid

    def rotate(self) -> str:
        """A new RSA key, published beside the others; tokens are signed with it by default."""
        self._rsa_made += 1
        self.rsa_kid = self._add("RS256", rsa_key(self._rsa_made))
        return self.rsa_kid

    def withdraw(self, kid: str) -> None:
        """Stop publishing `kid` (tokens can still be signed with it, to show they fail)."""
        self.published.remove(kid)

    # -- tokens -------------------------------------------------------------------------------

    def claims(self, **claims: Any) -> dict[str, Any]:
        now = int(time.time())
        base = {"iss": self.issuer, "aud": self.audience, "sub": "alice", "iat": now}
        base["exp"] = now + 300
        return {k: v for k, v in {**base, **claims}.items() if v is not None}

    def token(
        self,
        *,
        alg: str = "RS256",
        kid: str | None = None,
        header: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        """A token signed by this issuer; any claim may be overridden (None: left out)."""
        kid = kid or (self.rsa_kid if alg == "RS256" else self.ec_kid)
        _, key = self.signing[kid]
        return jwt.encode(
            self.claims(**claims), key, algorithm=alg, headers={"kid": kid, **(header or {})}
        )

    def unsigned(self, **claims: Any) -> str:
        """`alg: none`, no signature."""
        head = b64(json.dumps({"alg": "none", "typ": "JWT", "kid": self.rsa_kid}).encode())
        return f"{head}.{b64(json.dumps(self.claims(**claims)).encode())}."

    def hmac_with_public_key(self, **claims: Any) -> str:
        """HS256 keyed with the RSA key's public PEM: the classic algorithm confusion."""
        _, key = self.signing[self.rsa_kid]
        secret = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": self.rsa_kid}).encode())
        body = b64(json.dumps(self.claims(**claims)).encode())
        mac = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
        return f"{head}.{body}.{b64(mac)}"

    def with_alg(self, alg: str, **claims: Any) -> str:
        """A token whose header names `alg`, its signature RS256's (so only the name differs)."""
        good = self.token(**claims)
        _, body, signature = good.split(".")
        head = b64(json.dumps({"alg": alg, "typ": "JWT", "kid": self.rsa_kid}).encode())
        return f"{head}.{body}.{signature}"

    # -- HTTP ---------------------------------------------------------------------------------

    async def wait_for_discovery(self, n: int) -> None:
        """Until the discovery document has been asked for `n` times (answered or not)."""
        while self.discovery_requests < n:
            self._requested.clear()
            await self._requested.wait()

    async def _discovery(self, request: Request) -> Response:
        self.discovery_requests += 1
        self._requested.set()
        if self.down:
            return JSONResponse({"error": "down"}, status_code=503)
        return JSONResponse(
            {
                "issuer": self.discovery_issuer or self.issuer,
                "jwks_uri": self.jwks_uri or self._server.url(JWKS_PATH),
                "token_endpoint": self.issuer + "/protocol/openid-connect/token",
                "id_token_signing_alg_values_supported": ["RS256", "ES256"],
            }
        )

    async def _jwks(self, request: Request) -> Response:
        self.jwks_requests += 1
        if self.down:
            return JSONResponse({"error": "down"}, status_code=503)
        keys = [public_jwk(self.signing[kid][1], kid) for kid in self.published]
        return JSONResponse({"keys": keys + self.extra_jwks})
