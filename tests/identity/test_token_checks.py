"""Bearer JWTs from the issuer (DESIGN §23): what is accepted (RS256, ES256, within the
leeway) and every refusal, each a 401 `invalid_token` whose challenge and `details.problem`
name what failed, never repeating the token."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.api.kit import error_of, finishing, run_to_end
from tests.fakes.oidc_issuer import FakeIssuer, b64, rsa_key
from tests.identity.kit import KEY, bearer, oidc_client


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
async def test_a_token_signed_by_the_issuer_runs_and_reads_its_runs(alg: str) -> None:
    async with FakeIssuer() as issuer, oidc_client(issuer) as client:
        token = bearer(issuer.token(alg=alg, sub="alice"))
        run = await run_to_end(client, finishing(), token)
        listed = await client.get("/runs", headers=token)

    assert run["status"] == "completed"
    assert [r["id"] for r in listed.json()["runs"]] == [run["id"]]


async def test_api_keys_keep_working_beside_tokens_and_see_only_their_own_runs() -> None:
    async with FakeIssuer() as issuer, oidc_client(issuer) as client:
        alice = bearer(issuer.token(sub="alice"))
        by_key = await run_to_end(client, finishing(), bearer(KEY))
        by_token = await run_to_end(client, finishing(), alice)

        assert (await client.get(f"/runs/{by_key['id']}", headers=alice)).status_code == 404
        assert (await client.get(f"/runs/{by_token['id']}", headers=bearer(KEY))).status_code == 404
        keyed = (await client.get("/runs", headers=bearer(KEY))).json()["runs"]
        wrong = await client.get("/runs", headers=bearer("not-a-key"))

    assert [r["id"] for r in keyed] == [by_key["id"]]
    error = error_of(wrong, 401, "unauthorized")
    assert "invalid API key, and not a JWT" in error["message"]


async def test_exp_and_nbf_are_checked_with_a_small_leeway() -> None:
    now = int(time.time())
    async with FakeIssuer() as issuer, oidc_client(issuer, oidc_leeway_s=30) as client:
        just_expired = await client.get("/runs", headers=bearer(issuer.token(exp=now - 5)))
        almost_valid = await client.get("/runs", headers=bearer(issuer.token(nbf=now + 5)))
        expired = await client.get("/runs", headers=bearer(issuer.token(exp=now - 120)))
        early = await client.get("/runs", headers=bearer(issuer.token(nbf=now + 120)))

    assert just_expired.status_code == 200, just_expired.text
    assert almost_valid.status_code == 200, almost_valid.text
    refused(expired, "expired", "expired")
    refused(early, "not_yet_valid", "not valid yet")


def refused(response: httpx.Response, problem: str, says: str, token: str = "") -> dict[str, Any]:
    """A 401 invalid_token naming `problem`, in the body and in the Bearer challenge."""
    error = error_of(response, 401, "invalid_token")
    assert error["details"] == {"problem": problem}
    assert says in error["message"], error["message"]
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="invalid_token", error_description="'), challenge
    assert says in challenge
    if token:
        for part in [token, *(p for p in token.split(".") if len(p) > 8)]:
            assert part not in response.text
            assert part not in str(response.headers)
    return error


async def test_every_refusal_names_what_failed_and_never_the_token() -> None:
    now = int(time.time())
    async with FakeIssuer() as issuer, oidc_client(issuer) as client:
        good = issuer.token(sub="alice")
        head, body, signature = good.split(".")
        other_body = b64(b'{"sub": "mallory"}')
        foreign = FakeIssuer()  # the same kid, another key: a forger's
        foreign.signing[issuer.rsa_kid] = ("RS256", rsa_key(99))
        cases = {
            "expired": (issuer.token(exp=now - 600), "expired", "expired (exp)"),
            "audience": (issuer.token(aud="https://other.test"), "audience", "audience (aud)"),
            "issuer": (issuer.token(iss="https://evil.test/"), "issuer", "issuer (iss)"),
            "unknown kid": (issuer.token(header={"kid": "nobody"}), "unknown_key", "key id"),
            "tampered": (f"{head}.{other_body}.{signature}", "signature", "signature"),
            "forged": (foreign.token(kid=issuer.rsa_kid), "signature", "signature"),
            "no exp": (issuer.token(exp=None), "claims", "no exp claim"),
            "no aud": (issuer.token(aud=None), "claims", "no aud claim"),
            "no sub": (issuer.token(sub=None), "claims", "sub claim"),
            "malformed": ("abc.def.ghi", "malformed", "malformed"),
            "not base64": (f"{head}.{body}.***", "malformed", "malformed"),
            "header not JSON": (f"{b64(b'{oops')}.{body}.{signature}", "malformed", "malformed"),
            "too long": (f"{head}.{'a' * 20_000}.{signature}", "malformed", "longer than 16,384"),
        }
        for name, (token, problem, says) in cases.items():
            response = await client.get("/runs", headers=bearer(token))
            assert response.status_code == 401, name
            refused(response, problem, says, token)


async def test_none_hmac_over_the_public_key_and_unknown_algorithms_are_refused() -> None:
    async with FakeIssuer() as issuer, oidc_client(issuer) as client:
        cases = {
            "none": (issuer.unsigned(sub="alice"), "signed with none"),
            "hmac": (issuer.hmac_with_public_key(sub="alice"), "signed with HS256"),
            "RS512": (issuer.with_alg("RS512", sub="alice"), "signed with RS512"),
            "made up": (issuer.with_alg("XQ999", sub="alice"), "an unknown algorithm"),
            "ES256 on the RSA key": (issuer.with_alg("ES256", sub="alice"), "not its key's"),
        }
        for name, (token, says) in cases.items():
            response = await client.get("/runs", headers=bearer(token))
            assert response.status_code == 401, name
            error = refused(response, "algorithm", says, token)
            assert "XQ999" not in error["message"]


async def test_a_missing_or_other_scheme_credential_gets_a_plain_bearer_challenge() -> None:
    async with FakeIssuer() as issuer, oidc_client(issuer) as client:
        missing = await client.get("/runs")
        basic = await client.get("/runs", headers={"Authorization": "Basic YTpi"})

    for response in (missing, basic):
        error_of(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"
