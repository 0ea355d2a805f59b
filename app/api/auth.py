"""Short-lived tokens scoped to one run's events, and who is calling (`Caller`, from
`app.identity`: API keys, admin keys and OIDC tokens, DESIGN §23).

A browser's EventSource cannot send headers, so it follows a run with `?token=`: an HMAC of
the run id and an expiry, never the API key or the access token itself. It stands for the
run's owner, with read access alone.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time

from app.identity.caller import READ_ONLY, Caller, owner_of

__all__ = ["Caller", "StreamTokens", "owner_of"]


class StreamTokens:
    """`<expires>.<owner tag>.<signature>`: the owner tag is an HMAC of the run's owner with
    this server's secret (never a plain digest of the key, which could be brute-forced from a
    URL or a log line), the signature an HMAC of the run id, the tag and the expiry."""

    def __init__(self, secret: bytes | None = None, *, ttl_s: int = 300) -> None:
        self._secret = secret or secrets.token_bytes(32)
        self.ttl_s = ttl_s

    def _mac(self, message: str, size: int = 32) -> str:
        digest = hmac.new(self._secret, message.encode(), hashlib.sha256).digest()[:size]
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def _owner_tag(self, owner: str | None) -> str:
        return self._mac(f"owner|{owner or ''}", 16)

    def _sign(self, run_id: str, tag: str, expires: int) -> str:
        return self._mac(f"{run_id}|{tag}|{expires}")

    def issue(self, run_id: str, owner: str | None, *, now: float | None = None) -> tuple[str, int]:
        """A token for `run_id`'s events and its expiry (epoch seconds)."""
        expires = int(now if now is not None else time.time()) + self.ttl_s
        tag = self._owner_tag(owner)
        return f"{expires}.{tag}.{self._sign(run_id, tag, expires)}", expires

    def verify(
        self, token: str, run_id: str, owner: str | None, *, now: float | None = None
    ) -> Caller | None:
        """The caller the token stands for (the run's `owner`), or None if it is forged,
        expired, for another run or for another owner."""
        try:
            expires_text, tag, signature = token.split(".", 2)
            expires = int(expires_text) if len(expires_text) <= 18 else -1
        except ValueError:
            return None
        if expires < (now if now is not None else time.time()):
            return None
        tag_ok = hmac.compare_digest(tag.encode(), self._owner_tag(owner).encode())
        signed_ok = hmac.compare_digest(
            signature.encode(), self._sign(run_id, tag, expires).encode()
        )
        return Caller(owner, READ_ONLY) if tag_ok and signed_ok else None
