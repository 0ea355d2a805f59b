"""Who is calling: API keys, admin keys and bearer JWTs from an OIDC provider (DESIGN §23).

    caller.py    `Caller` (owner, grants, admin), `Access`, the owner of a key or a token
    settings.py  the server settings of identity, and the rule an issuer URL must meet
    errors.py    what a credential can fail with (mapped to HTTP in `app.api.errors`)
    bearer.py    `Authenticator`: an `Authorization` header to a `Caller`
    discovery.py the issuer's discovery document and JWKS, over guarded outbound HTTP
    jwks.py      `IssuerKeys`: the issuer's signing keys, cached and refreshed within bounds
    tokens.py    `TokenVerifier`: a JWT checked with PyJWT, and its owner, scopes and admin

Nothing here knows HTTP frameworks or storage. PyJWT (and `cryptography` under it) is
imported by `jwks.py` and `tokens.py` only, which `bearer.py` imports only when
FINISHLINE_OIDC_ISSUER is set.
"""
