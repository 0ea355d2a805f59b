"""The issuer's discovery document and JWKS, fetched over the service's guarded outbound HTTP
(`app.tools.fetcher.HttpFetcher`: aiohttp's pool, a deadline per exchange, redirects
checked hop by hop, the body read up to a cap).

Each host is reached through a `NetworkGuard` listing that host alone: the issuer's, and the
JWKS's when discovery names another (Google's keys live on another host than its issuer).
Listed explicitly, a host may resolve to a private address (a provider inside the cluster);
no other host is reachable, redirects included. Every URL also meets `issuer_url_problem`
(https, or http on loopback).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from app.engine.errors import FinishlineError
from app.identity.settings import issuer_url_problem
from app.tools.base import ToolError
from app.tools.fetcher import HttpFetcher
from app.tools.netguard import NetworkGuard

DISCOVERY_PATH = "/.well-known/openid-configuration"
FETCH_TIMEOUT_S = 10.0
"""One exchange with the issuer, redirects and body included."""
MAX_DOCUMENT_BYTES = 512 * 1024
"""A discovery document or a JWKS larger than this is refused (a JWKS holds a few keys)."""
MAX_REDIRECTS = 0
"""None followed: a redirect could lead from https to plain http on the same host."""


class IssuerFetchError(FinishlineError):
    """The issuer's documents could not be fetched or read; the message says why. Kept by
    `IssuerKeys` as the reason tokens cannot be checked; never answered as such."""


class IssuerDocuments:
    """Fetches `issuer`'s discovery document and its JWKS; close with `aclose`."""

    def __init__(
        self,
        issuer: str,
        *,
        timeout_s: float = FETCH_TIMEOUT_S,
        max_bytes: int = MAX_DOCUMENT_BYTES,
    ) -> None:
        self.issuer = issuer
        self.discovery_url = issuer.rstrip("/") + DISCOVERY_PATH
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._fetchers: dict[str, HttpFetcher] = {}

    async def jwks_uri(self) -> str:
        """The `jwks_uri` of the discovery document, whose `issuer` must be ours exactly."""
        document = await self._json(self.discovery_url, "discovery document")
        if document.get("issuer") != self.issuer:
            raise IssuerFetchError(
                f"the discovery document at {self.discovery_url} names another issuer than "
                "FINISHLINE_OIDC_ISSUER (they must be equal, character for character)"
            )
        uri = document.get("jwks_uri")
        if not isinstance(uri, str):
            raise IssuerFetchError(
                f"the discovery document at {self.discovery_url} has no jwks_uri"
            )
        problem = issuer_url_problem(uri)
        if problem is not None:
            raise IssuerFetchError(f"the discovery document's jwks_uri: {problem}")
        return uri

    async def jwks(self, uri: str) -> dict[str, Any]:
        """The JSON Web Key Set at `uri`."""
        document = await self._json(uri, "JWKS")
        if not isinstance(document.get("keys"), list):
            raise IssuerFetchError(f"the JWKS at {uri} has no list of keys")
        return document

    async def _json(self, url: str, what: str) -> dict[str, Any]:
        fetcher = self._fetcher(url)
        try:
            response = await fetcher.fetch("GET", url, headers={"Accept": "application/json"})
        except ToolError as exc:  # BlockedHostError included: the message names the host
            raise IssuerFetchError(f"fetching the {what} at {url} failed: {exc}") from None
        if not response.ok:
            raise IssuerFetchError(f"the {what} at {url} answered {response.status_line}")
        if response.truncated:
            raise IssuerFetchError(
                f"the {what} at {url} is larger than {self.max_bytes:,} bytes; not read"
            )
        try:
            document = json.loads(response.body)
        except ValueError as exc:
            raise IssuerFetchError(f"the {what} at {url} is not JSON: {exc}") from None
        if not isinstance(document, dict):
            raise IssuerFetchError(f"the {what} at {url} is not a JSON object")
        return document

    def _fetcher(self, url: str) -> HttpFetcher:
        host = httpx.URL(url).host
        fetcher = self._fetchers.get(host)
        if fetcher is None:
            fetcher = self._fetchers[host] = HttpFetcher(
                NetworkGuard([host]),
                max_bytes=self.max_bytes,
                timeout_s=self.timeout_s,
                max_redirects=MAX_REDIRECTS,
            )
        return fetcher

    async def aclose(self) -> None:
        for fetcher in self._fetchers.values():
            await fetcher.aclose()
