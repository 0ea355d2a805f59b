"""Who is calling: bearer API keys, and short-lived tokens scoped to one run's events.

A browser's EventSource cannot send headers, so it follows a run with `?token=`: an HMAC of
the run id and an expiry, never the API key itself.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass


def owner_of(api_key: str) -> str:
    """The stored owner of a run: a digest of the key, never the key."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Caller:
    owner: str | None
    """None when auth is off: every run is visible."""

    @property
    def any_owner(self) -> bool:
        return self.owner is None


class StreamTokens:
    def __init__(self, secret: bytes | None = None, *, ttl_s: int = 300) -> None:
        self._secret = secret or secrets.token_bytes(32)
        self.ttl_s = ttl_s

    def _sign(self, run_id: str, owner: str, expires: int) -> str:
        message = f"{run_id}|{owner}|{expires}".encode()
        digest = hmac.new(self._secret, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def issue(self, run_id: str, owner: str | None, *, now: float | None = None) -> tuple[str, int]:
        """A token for `run_id`'s events and its expiry (epoch seconds)."""
        expires = int(now if now is not None else time.time()) + self.ttl_s
        owner_part = owner or ""
        return f"{expires}.{owner_part}.{self._sign(run_id, owner_part, expires)}", expires

    def verify(self, token: str, run_id: str, *, now: float | None = None) -> Caller | None:
        """The caller the token stands for, or None if it is forged, expired or for another run."""
        try:
            expires_text, owner, signature = token.split(".", 2)
            expires = int(expires_text)
        except ValueError:
            return None
        if expires < (now if now is not None else time.time()):
            return None
        if not hmac.compare_digest(signature, self._sign(run_id, owner, expires)):
            return None
        return Caller(owner or None)
