"""The server settings of identity: API keys, admin keys and the OIDC issuer (DESIGN §23).

`app.settings.ServerSettings` inherits them, so they are `FINISHLINE_*` variables like any
other, declared once here. Every combination that cannot work is refused at start-up, naming
the variable: an issuer over plain http off loopback, an issuer without an audience, half of
the admin claim, an API key that would read as a JWT.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Self
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

CommaList = Annotated[list[str], NoDecode]

LOOPBACK_NAMES = ("localhost",)
"""Hosts besides loopback IP literals that an `http://` issuer may name."""


def comma_list(value: Any) -> Any:
    """A comma-separated string as its stripped, non-empty parts (a list stays as it is)."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def issuer_url_problem(url: str) -> str | None:
    """None when `url` may be an issuer's (or its JWKS's) URL, else why not: `https`, or
    `http` on a loopback address only (a development provider on this machine); no query,
    no fragment, no user info."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError as exc:
        return f"{url[:200]!r} is not a URL: {exc}"
    if parts.scheme not in ("https", "http") or not host:
        return f"{url[:200]!r} is not an https:// URL"
    if parts.query or parts.fragment or parts.username or parts.password:
        return f"{url[:200]!r} has a query, a fragment or user info"
    if parts.scheme == "http" and not _is_loopback(host):
        return (
            f"{url[:200]!r} is plain http on a host that is not a loopback address: keys "
            "fetched over it could be swapped on the way; use https (http is accepted for "
            "127.0.0.1, ::1 and localhost only)"
        )
    return None


def _is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class IdentitySettings(BaseSettings):
    """Who may call: API keys, admin keys, and bearer JWTs of one OIDC issuer."""

    model_config = SettingsConfigDict(
        env_prefix="FINISHLINE_", env_file=".env", extra="ignore", populate_by_name=True
    )

    api_keys: CommaList = Field(
        default_factory=list,
        description="Comma-separated bearer keys; empty (and no admin key, no OIDC issuer) = "
        "no auth. Each run is visible only to the key that made it.",
    )
    admin_keys: CommaList = Field(
        default_factory=list,
        description="Comma-separated bearer keys that are also admins (they see group_by=key "
        "reports); each is accepted as an API key whether FINISHLINE_API_KEYS lists it or not.",
    )
    oidc_issuer: str | None = Field(
        None,
        description="An OIDC provider whose access tokens (JWTs, RS256 or ES256) are accepted "
        "beside the API keys: its issuer URL exactly as tokens' `iss` says it (https, or http "
        "on a loopback address only). Keys come from its discovery document's jwks_uri.",
    )
    oidc_audience: str | None = Field(
        None,
        description="The `aud` a token must carry (this API's identifier at the provider); "
        "required with FINISHLINE_OIDC_ISSUER.",
    )
    oidc_owner_claim: str = Field(
        "sub",
        min_length=1,
        description="The claim whose value owns runs, threads, quotas and usage: `sub` (each "
        "user apart) or a tenant claim such as `org_id` (runs shared within the tenant).",
    )
    oidc_admin_claim: str | None = Field(
        None,
        description="A claim that makes a token an admin when it holds FINISHLINE_OIDC_ADMIN_"
        "VALUE (equal to it, or a list containing it), e.g. `roles`. Unset: no admin tokens.",
    )
    oidc_admin_value: str | None = Field(
        None, description="The value of FINISHLINE_OIDC_ADMIN_CLAIM that makes a token an admin."
    )
    oidc_leeway_s: float = Field(
        30.0,
        ge=0,
        le=300,
        description="Clock skew allowed when checking a token's exp, nbf and iat.",
    )
    oidc_keys_refresh_s: float = Field(
        60.0,
        gt=0,
        description="Least time between two fetches of the issuer's keys caused by tokens "
        "naming an unknown key id (a flood of made-up kids costs one fetch per interval); also "
        "the longest wait between retries while the issuer cannot be reached.",
    )
    oidc_keys_max_age_s: float = Field(
        3600.0,
        gt=0,
        description="The issuer's keys are fetched again after this, so a key it withdrew "
        "stops being accepted.",
    )

    @field_validator("api_keys", "admin_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: Any) -> Any:
        return comma_list(value)

    @property
    def auth_enabled(self) -> bool:
        """Whether callers must present a key or a token."""
        return bool(self.api_keys or self.admin_keys or self.oidc_issuer)

    @model_validator(mode="after")
    def _identity_is_consistent(self) -> Self:
        issuer = self.oidc_issuer
        if issuer is not None:
            problem = issuer_url_problem(issuer)
            if problem is not None:
                raise ValueError(f"FINISHLINE_OIDC_ISSUER: {problem}")
            if not self.oidc_audience:
                raise ValueError(
                    "FINISHLINE_OIDC_AUDIENCE must be set with FINISHLINE_OIDC_ISSUER: without "
                    "it, a token the provider issued for any other application would be accepted"
                )
            jwt_like = [k for k in [*self.api_keys, *self.admin_keys] if k.count(".") == 2]
            if jwt_like:
                raise ValueError(
                    "FINISHLINE_API_KEYS / FINISHLINE_ADMIN_KEYS: a key with two dots reads as a "
                    "JWT when FINISHLINE_OIDC_ISSUER is set; choose keys without two dots"
                )
        elif self.oidc_audience is not None or self.oidc_admin_claim is not None:
            raise ValueError(
                "FINISHLINE_OIDC_AUDIENCE and FINISHLINE_OIDC_ADMIN_CLAIM need "
                "FINISHLINE_OIDC_ISSUER: without an issuer no token is accepted"
            )
        if (self.oidc_admin_claim is None) != (self.oidc_admin_value is None):
            raise ValueError(
                "FINISHLINE_OIDC_ADMIN_CLAIM and FINISHLINE_OIDC_ADMIN_VALUE are set together"
            )
        return self
