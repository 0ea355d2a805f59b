"""What a credential can fail with. Each maps to one HTTP answer in `app.api.errors`
(`IDENTITY_ERRORS`; a test checks every class has its entry):

    IdentityError
    ├── MissingCredentialsError  no `Authorization: Bearer …`                   401
    ├── InvalidApiKeyError       a bearer value that is no key (and no JWT)      401
    ├── InvalidTokenError        a JWT refused; `problem` says why               401 invalid_token
    ├── InsufficientScopeError   a token without the scope the request needs    403
    └── IssuerUnavailableError   the issuer's keys are not known yet (down)      503

Messages name what failed and never hold the credential, nor anything read from it: a
token's claims and header are the caller's, so a message quotes only this server's settings.
"""

from __future__ import annotations

from enum import StrEnum

from app.engine.errors import FinishlineError


class TokenProblem(StrEnum):
    """Why a token was refused: `details.problem` of the 401."""

    MALFORMED = "malformed"
    ALGORITHM = "algorithm"
    UNKNOWN_KEY = "unknown_key"
    SIGNATURE = "signature"
    EXPIRED = "expired"
    NOT_YET_VALID = "not_yet_valid"
    ISSUER = "issuer"
    AUDIENCE = "audience"
    CLAIMS = "claims"


class IdentityError(FinishlineError):
    """A request's credentials refused, or not checkable now."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class MissingCredentialsError(IdentityError):
    """No `Authorization: Bearer …` where the server needs one."""

    def __init__(self) -> None:
        super().__init__("missing Authorization: Bearer <API key or access token>")


class InvalidApiKeyError(IdentityError):
    """A bearer value that is no key of the server's (and no JWT, with an issuer set)."""

    def __init__(self, *, tokens: bool = False) -> None:
        what = "invalid API key" + (", and not a JWT access token" if tokens else "")
        super().__init__(what)


class InvalidTokenError(IdentityError):
    """An access token (JWT) refused: `details.problem` says why (signature, exp, aud, …)."""

    def __init__(self, problem: TokenProblem, message: str) -> None:
        super().__init__(message)
        self.problem = problem


class InsufficientScopeError(IdentityError):
    """A token without the `finishline:` scope the request needs."""

    def __init__(self, scope: str) -> None:
        super().__init__(
            f"this request needs the {scope} scope; the token carries finishline: scopes without it"
        )
        self.scope = scope


class IssuerUnavailableError(IdentityError):
    """The issuer's signing keys are not known yet (it is down): tokens cannot be checked."""

    def __init__(self, why: str, retry_after_s: int) -> None:
        super().__init__(
            "access tokens cannot be checked yet: the identity provider's signing keys are "
            f"not loaded ({why}); API keys still work"
        )
        self.why = why
        self.retry_after_s = retry_after_s
