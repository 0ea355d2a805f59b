"""FINISHLINE_TOKEN: the CLI sends an access token of the service's identity provider as its
bearer credential (instead of FINISHLINE_API_KEY when both are set), and a refused token is
reported with what the service says failed."""

from __future__ import annotations

import time
from pathlib import Path

from app.cli.exits import ExitCode
from tests.cli.kit import cli, cli_settings, finish, start_run
from tests.fakes.oidc_issuer import AUDIENCE, FakeIssuer
from tests.identity.kit import KEY, served_oidc_app


async def test_the_token_is_sent_as_the_bearer_credential(tmp_path: Path) -> None:
    async with FakeIssuer() as issuer:
        config = cli_settings(oidc_issuer=issuer.issuer, oidc_audience=AUDIENCE, api_keys=[KEY])
        async with served_oidc_app(config) as server:
            alice = issuer.token(sub="alice")
            run_id = await start_run(server, tmp_path, finish(), FINISHLINE_TOKEN=alice)
            shown = await cli(server, "show", run_id, env={"FINISHLINE_TOKEN": alice})
            both = {"FINISHLINE_TOKEN": alice, "FINISHLINE_API_KEY": KEY}
            listed = await cli(server, "runs", env=both)
            by_key = await cli(server, "runs", env={"FINISHLINE_API_KEY": KEY})
            expired = issuer.token(sub="alice", exp=int(time.time()) - 600)
            refused = await cli(server, "runs", env={"FINISHLINE_TOKEN": expired})

    assert shown.code == ExitCode.OK
    assert run_id in shown.out
    assert listed.code == ExitCode.OK
    assert run_id in listed.out  # the token, not the key, was sent
    assert run_id not in by_key.out
    assert refused.code == ExitCode.API_ERROR
    assert "401 invalid_token" in refused.err
    assert "expired" in refused.err
    assert "FINISHLINE_TOKEN" in refused.err
    assert expired not in refused.err
