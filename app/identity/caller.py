"""Who a request is from: its owner (what runs, threads, quotas and usage belong to), what
it may do, and whether it is an admin.

An owner is a digest, never a credential: `owner_of(key)` for an API key (32 hex digits) and
`token_owner(...)` for a token (`oidc:` and 32 hex digits, of the issuer, the owner claim's
name and its value). The two cannot collide: a key's owner has no colon.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum

from app.identity.errors import InsufficientScopeError

TOKEN_OWNER_PREFIX = "oidc:"


class Access(StrEnum):
    """What a request does, named as the OAuth scope that grants it (DESIGN §23)."""

    READ = "finishline:read"
    """GETs and streams: reading runs, their events, usage, tools, settings."""
    WRITE = "finishline:write"
    """Everything else: starting, steering, deciding, cancelling, deleting."""


EVERY_ACCESS = frozenset(Access)
READ_ONLY = frozenset({Access.READ})


@dataclass(frozen=True, slots=True)
class Caller:
    owner: str | None
    """None when auth is off: every run is visible."""
    grants: frozenset[Access] = EVERY_ACCESS
    """What the caller may do: everything for an API key, and for a token that carries no
    `finishline:` scope; a token that carries any is held to those it carries."""
    admin: bool = False
    """An admin key (FINISHLINE_ADMIN_KEYS), or a token holding the admin claim's value.
    Admins are owners like any other (they see their own runs); what only admins may see
    (group_by=key reports) checks this flag."""

    @property
    def any_owner(self) -> bool:
        return self.owner is None

    def require(self, access: Access) -> Caller:
        """This caller, if it may do `access`; `InsufficientScopeError` otherwise."""
        if access not in self.grants:
            raise InsufficientScopeError(access.value)
        return self


ANYONE = Caller(None)
"""The caller when auth is off."""


def owner_of(api_key: str) -> str:
    """The stored owner of an API key's runs: a digest of the key, never the key."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:32]


def token_owner(issuer: str, claim: str, value: str) -> str:
    """The stored owner of a token's runs: a digest of who the issuer says it is."""
    digest = hashlib.sha256(f"{issuer}\x00{claim}\x00{value}".encode()).hexdigest()[:32]
    return TOKEN_OWNER_PREFIX + digest
