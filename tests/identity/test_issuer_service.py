"""The service and its issuer over time: start-up does not wait for a provider that is down
(tokens get 503 naming why, /healthz and API keys work), keys rotate without a restart, a
flood of made-up key ids costs one fetch, and settings that cannot work stop start-up."""

from __future__ import annotations

import anyio
import pytest
from pydantic import ValidationError

from tests.api.kit import error_of, finishing, run_to_end, settings
from tests.fakes.oidc_issuer import AUDIENCE, FakeIssuer
from tests.identity.kit import KEY, bearer, keys_loaded, oidc_app, oidc_client


async def test_an_issuer_down_at_start_up_then_up_tokens_wait_for_it_keys_do_not() -> None:
    async with FakeIssuer() as issuer:
        issuer.down = True
        async with oidc_app(issuer, wait=False, oidc_keys_refresh_s=0.2) as (client, state):
            token = bearer(issuer.token(sub="alice"))
            with anyio.fail_after(10):  # the first try failed: it tries again, and serves
                await issuer.wait_for_discovery(2)
            health = await client.get("/healthz")
            unavailable = await client.get("/runs", headers=token)
            by_key = await client.get("/runs", headers=bearer(KEY))
            issuer.down = False
            await keys_loaded(state, timeout_s=20)
            answer = await client.get("/runs", headers=token)

    assert health.status_code == 200
    error = error_of(unavailable, 503, "identity_provider_unavailable")
    assert "openid-configuration answered HTTP 503" in error["message"]
    assert "API keys still work" in error["message"]
    assert int(unavailable.headers["retry-after"]) >= 1
    assert by_key.status_code == 200
    assert answer.status_code == 200, answer.text


async def test_keys_rotate_without_a_restart_and_a_withdrawn_key_stops_working() -> None:
    async with FakeIssuer() as issuer, oidc_app(issuer) as (client, state):
        old_token = bearer(issuer.token(sub="alice"))
        assert (await client.get("/runs", headers=old_token)).status_code == 200  # now cached
        old = issuer.rsa_kid
        issuer.rotate()
        new_token = bearer(issuer.token(sub="alice"))
        with_new_key = await run_to_end(client, finishing(), new_token)
        issuer.withdraw(old)
        await state["authenticator"].tokens.keys.refresh()  # what the max-age refresh does
        withdrawn = await client.get("/runs", headers=old_token)
        still = await client.get(f"/runs/{with_new_key['id']}", headers=new_token)

    assert with_new_key["status"] == "completed"
    assert error_of(withdrawn, 401, "invalid_token")["details"] == {"problem": "unknown_key"}
    assert still.status_code == 200


async def test_a_flood_of_made_up_key_ids_costs_one_fetch_of_the_jwks() -> None:
    async with FakeIssuer() as issuer, oidc_client(issuer) as client:
        loaded = issuer.jwks_requests
        for n in range(300):
            token = bearer(issuer.token(header={"kid": f"made-up-{n}"}))
            assert (await client.get("/runs", headers=token)).status_code == 401
        good = await client.get("/runs", headers=bearer(issuer.token()))

    assert loaded == 1
    assert issuer.jwks_requests == 2
    assert good.status_code == 200


IDP = {"oidc_issuer": "https://idp.example.com", "oidc_audience": "api"}


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({**IDP, "oidc_issuer": "http://idp.example.com/a"}, "FINISHLINE_OIDC_ISSUER: "),
        ({**IDP, "oidc_issuer": "ftp://idp.example.com"}, "is not an https:// URL"),
        ({**IDP, "oidc_issuer": "https://idp.example.com/?x=1"}, "has a query"),
        ({"oidc_issuer": "https://idp.example.com"}, "FINISHLINE_OIDC_AUDIENCE must be set"),
        ({"oidc_audience": "api"}, "need FINISHLINE_OIDC_ISSUER"),
        ({**IDP, "oidc_admin_claim": "roles"}, "FINISHLINE_OIDC_ADMIN_VALUE are set together"),
        ({**IDP, "api_keys": ["a.b.c"]}, "a key with two dots reads as a JWT"),
    ],
)
def test_settings_that_cannot_work_stop_start_up_naming_the_variable(
    values: dict[str, object], says: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        settings(**values)
    assert says in str(refused.value)


@pytest.mark.parametrize(
    "issuer",
    ["https://idp.example.com/a", "http://127.0.0.1:80/x", "http://[::1]:80", "http://localhost/"],
)
def test_https_issuers_and_plain_http_on_loopback_are_accepted(issuer: str) -> None:
    assert settings(oidc_issuer=issuer, oidc_audience=AUDIENCE).auth_enabled
