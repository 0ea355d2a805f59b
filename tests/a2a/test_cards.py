"""Agent cards (DESIGN §17): each profile's at /a2a/NAME/.well-known/agent-card.json, read with
the SDK's card resolver; FINISHLINE_A2A_DEFAULT_AGENT's at /.well-known/agent-card.json; public
even with API keys (they declare the bearer scheme); the SDK imported only by a server that has
profiles to serve."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from a2a.client import A2ACardResolver, AgentCardResolutionError
from google.protobuf.json_format import MessageToDict
from pydantic import ValidationError

from app.settings import Settings
from tests.a2a.kit import AGENTS, KEY_A, a2a_service, a2a_settings

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


async def test_each_profile_has_a_card_with_its_skill_streaming_and_both_protocol_versions() -> (
    None
):
    async with a2a_service() as service:
        card = await service.card("calc")
        ops = await service.card("ops")

    assert card.name == "calc"
    assert card.description == AGENTS["calc"]["description"]
    assert card.capabilities.streaming is True
    assert card.capabilities.push_notifications is False
    interfaces = [
        (i.protocol_binding, i.protocol_version, i.url) for i in card.supported_interfaces
    ]
    url = service.url("/a2a/calc")
    assert interfaces == [("JSONRPC", "1.0", url), ("JSONRPC", "0.3", url)]
    (skill,) = card.skills
    assert (skill.id, skill.name, skill.description) == ("calc", "calc", card.description)
    assert list(skill.tags) == ["finishline", "calculator"]
    assert "text/plain" in card.default_input_modes
    assert not card.security_schemes
    assert not card.security_requirements  # no keys: no auth
    assert ops.name == "ops"
    assert ops.supported_interfaces[0].url == service.url("/a2a/ops")


async def test_with_api_keys_the_card_is_public_and_declares_a_bearer_scheme() -> None:
    async with a2a_service(a2a_settings(api_keys=[KEY_A])) as service:
        card = await service.card("calc")  # no key sent
        raw = (await service.http.get(service.url("/a2a/calc/.well-known/agent-card.json"))).json()

    scheme = card.security_schemes["bearer"]
    assert scheme.http_auth_security_scheme.scheme == "bearer"
    assert [list(r.schemes) for r in card.security_requirements] == [["bearer"]]
    # what a 0.3 client reads: the top-level url, protocolVersion and security of its layout
    assert raw["protocolVersion"] == "0.3"
    assert raw["url"] == service.url("/a2a/calc")
    assert raw["security"] == [{"bearer": []}]
    assert raw["securitySchemes"]["bearer"]["type"] == "http"


async def test_the_default_agent_is_also_the_hosts_card() -> None:
    async with a2a_service(a2a_settings(a2a_default_agent="ops")) as service:
        resolver = A2ACardResolver(service.http, service.url())
        card = await resolver.get_agent_card()
    assert card.name == "ops"
    assert card.supported_interfaces[0].url == service.url("/a2a/ops")


async def test_without_a_default_agent_the_hosts_card_and_unknown_profiles_are_404() -> None:
    async with a2a_service() as service:
        with pytest.raises(AgentCardResolutionError) as host:
            await A2ACardResolver(service.http, service.url()).get_agent_card()
        with pytest.raises(AgentCardResolutionError) as unknown:
            await A2ACardResolver(service.http, service.url("/a2a/nobody")).get_agent_card()
        answer = await service.http.get(service.url("/a2a/nobody/.well-known/agent-card.json"))
    assert host.value.status_code == 404
    assert unknown.value.status_code == 404
    assert answer.json()["error"]["details"]["available"] == ["calc", "ops"]


@pytest.mark.parametrize(
    "path", ["/a2a/calc/.well-known/agent-card.json", "/.well-known/agent-card.json"]
)
async def test_a_card_is_cacheable_and_a_request_naming_its_etag_is_answered_304(path: str) -> None:
    async with a2a_service(a2a_settings(a2a_default_agent="calc")) as service:
        first = await service.http.get(service.url(path))
        etag = first.headers["etag"]
        same = await service.http.get(service.url(path), headers={"If-None-Match": etag})
        listed = await service.http.get(
            service.url(path), headers={"If-None-Match": f'"other", W/{etag}'}
        )
        anything = await service.http.get(service.url(path), headers={"If-None-Match": "*"})
        other = await service.http.get(service.url(path), headers={"If-None-Match": '"other"'})
        again = await service.http.get(service.url(path))

    assert first.status_code == 200
    assert first.headers["cache-control"] == "public, max-age=300"
    assert etag == f'"{hashlib.sha256(first.content).hexdigest()[:32]}"'  # the card's bytes
    for not_modified in (same, listed, anything):
        assert not_modified.status_code == 304
        assert not_modified.content == b""
        assert not_modified.headers["etag"] == etag
        assert not_modified.headers["cache-control"] == "public, max-age=300"
    assert other.status_code == 200
    assert other.content == first.content
    assert again.headers["etag"] == etag  # the same card, the same tag


async def test_cards_that_differ_have_different_etags() -> None:
    async with a2a_service() as service:
        calc = await service.http.get(service.url("/a2a/calc/.well-known/agent-card.json"))
        ops = await service.http.get(service.url("/a2a/ops/.well-known/agent-card.json"))
    async with a2a_service(a2a_settings(api_keys=[KEY_A])) as service:
        keyed = await service.http.get(service.url("/a2a/calc/.well-known/agent-card.json"))
    assert len({calc.headers["etag"], ops.headers["etag"], keyed.headers["etag"]}) == 3


async def test_with_0_3_compatibility_off_the_card_is_a_strict_1_0_card() -> None:
    async with a2a_service(a2a_settings(a2a_v03=False, api_keys=[KEY_A])) as service:
        card = await service.card("calc")
        raw = (await service.http.get(service.url("/a2a/calc/.well-known/agent-card.json"))).json()

    interfaces = [(i.protocol_binding, i.protocol_version) for i in card.supported_interfaces]
    assert interfaces == [("JSONRPC", "1.0")]
    # none of the 0.3 layout's keys, which a strict 1.0 card check refuses
    assert not {"url", "protocolVersion", "preferredTransport", "security"} & set(raw)
    assert raw["securitySchemes"]["bearer"] == {
        "httpAuthSecurityScheme": {
            "scheme": "bearer",
            "description": "A finishline API key, or an access token of its identity "
            "provider; each task is visible to its key (or token owner) alone.",
        }
    }


def test_start_up_refuses_a_default_agent_that_names_no_profile() -> None:
    with pytest.raises(ValidationError, match="FINISHLINE_A2A_DEFAULT_AGENT='nobody' names no"):
        Settings(_env_file=None, agents=AGENTS, a2a_default_agent="nobody")
    with pytest.raises(ValidationError, match=r"profiles: none"):
        Settings(_env_file=None, a2a_default_agent="calc")


async def test_the_card_lists_the_tools_of_the_profile_as_tags() -> None:
    agents = {"two": {"description": "Two tools.", "tools": ["calculator", "current_time"]}}
    async with a2a_service(a2a_settings(agents=agents)) as service:
        card = MessageToDict(await service.card("two"))
    assert card["skills"][0]["tags"] == ["finishline", "calculator", "current_time"]


PROBE = """
import asyncio, sys
from asgi_lifespan import LifespanManager
from app.main import create_app
from app.settings import Settings

async def main():
    async with LifespanManager(create_app(Settings(_env_file=None, store_url="memory://"{extra}))):
        pass

asyncio.run(main())
print("a2a" in sys.modules, any(m.startswith("app.api.a2a") for m in sys.modules))
"""


@pytest.mark.parametrize("agents", [False, True])
def test_the_sdk_is_imported_only_by_a_server_with_profiles_to_serve(agents: bool) -> None:
    extra = ', agents={"calc": {"description": "d"}}' if agents else ""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(extra=extra)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(agents), str(agents)]
