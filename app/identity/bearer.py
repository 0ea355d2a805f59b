"""`Authenticator`: an `Authorization` header to a `Caller` (DESIGN §5, §23).

A bearer value with exactly two dots is a JWT when an OIDC issuer is set (the settings
refuse API keys of that shape then), checked by `TokenVerifier`; any other is compared, in
constant time, against every API key and admin key at once. With no key and no issuer, auth
is off and every caller is `ANYONE`.

PyJWT and the token modules are imported by `open_authenticator` only when an issuer is set.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from typing import TYPE_CHECKING

from app.identity.caller import ANYONE, Caller, owner_of
from app.identity.errors import InvalidApiKeyError, MissingCredentialsError
from app.identity.settings import IdentitySettings

if TYPE_CHECKING:
    from app.identity.tokens import TokenVerifier


def key_digest(api_key: str) -> bytes:
    """What API keys are compared by: equal-length digests, so a comparison's time says
    nothing about how much of a key matched."""
    return hashlib.sha256(api_key.encode()).digest()


class Authenticator:
    def __init__(
        self,
        *,
        api_keys: list[str],
        admin_keys: list[str] | None = None,
        tokens: TokenVerifier | None = None,
    ) -> None:
        admin_keys = admin_keys or []
        keys = list(dict.fromkeys([*api_keys, *admin_keys]))
        self._digests = [key_digest(key) for key in keys]
        self._admins = frozenset(keys.index(key) for key in admin_keys)
        self._owners = [owner_of(key) for key in keys]
        self.tokens = tokens
        self.enabled = bool(keys) or tokens is not None
        self._loader: asyncio.Task[None] | None = None

    async def caller(self, authorization: str | None) -> Caller:
        """Who sends `authorization`; an `IdentityError` when it is refused."""
        if not self.enabled:
            return ANYONE
        if not authorization:
            raise MissingCredentialsError()
        scheme, _, credential = authorization.partition(" ")
        credential = credential.strip()
        if scheme.lower() != "bearer" or not credential:
            raise InvalidApiKeyError(tokens=self.tokens is not None)
        if self.tokens is not None and credential.count(".") == 2:
            return await self.tokens.caller(credential)
        index = self._key_index(credential)
        if index is None:
            raise InvalidApiKeyError(tokens=self.tokens is not None)
        return Caller(self._owners[index], admin=index in self._admins)

    def _key_index(self, credential: str) -> int | None:
        """Which key `credential` is, compared in constant time against every one."""
        offered = key_digest(credential)
        matches = [hmac.compare_digest(offered, digest) for digest in self._digests]
        return matches.index(True) if True in matches else None

    def start(self, tasks: asyncio.TaskGroup) -> None:
        """Load the issuer's keys in the background (start-up does not wait for them)."""
        if self.tokens is not None:
            self._loader = tasks.create_task(self.tokens.keys.run(), name="oidc-keys")

    def stop(self) -> None:
        if self._loader is not None:
            self._loader.cancel()

    async def aclose(self) -> None:
        if self.tokens is not None:
            await self.tokens.keys.documents.aclose()


def open_authenticator(settings: IdentitySettings) -> Authenticator:
    """The authenticator `settings` describe (PyJWT imported only with an issuer)."""
    tokens = None
    if settings.oidc_issuer is not None and settings.oidc_audience is not None:
        from app.identity.discovery import IssuerDocuments
        from app.identity.jwks import IssuerKeys
        from app.identity.tokens import TokenVerifier

        keys = IssuerKeys(
            IssuerDocuments(settings.oidc_issuer),
            refresh_s=settings.oidc_keys_refresh_s,
            max_age_s=settings.oidc_keys_max_age_s,
        )
        tokens = TokenVerifier(
            keys,
            issuer=settings.oidc_issuer,
            audience=settings.oidc_audience,
            owner_claim=settings.oidc_owner_claim,
            admin_claim=settings.oidc_admin_claim,
            admin_value=settings.oidc_admin_value,
            leeway_s=settings.oidc_leeway_s,
        )
    return Authenticator(api_keys=settings.api_keys, admin_keys=settings.admin_keys, tokens=tokens)
