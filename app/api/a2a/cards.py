"""An agent profile's A2A agent card (DESIGN §17), built with the protocol's own models.

One skill, the profile: its name, description and tools (as tags, with `finishline`), text and
JSON in and out. Capabilities: streaming, no push notifications, no extended card. One
interface, `/a2a/NAME`: JSON-RPC at protocol 1.0; with 0.3 compatibility on
(FINISHLINE_A2A_V03), a second at the same URL: JSON-RPC at 0.3 (the SDK's compatibility
layer; a 0.3 client reads the card's top-level `url`, `protocolVersion` and
`preferredTransport`, which the SDK's encoder writes from that interface, and only when there
is one). With API keys, the card declares an HTTP bearer scheme and requires it. The URL is the
one the card was asked for at (the request's scheme and Host: behind a proxy, forward them).

Served with HTTP caching (A2A §8.6.1): `Cache-Control: public, max-age=300` and an `ETag`
made from the card's bytes; a request whose `If-None-Match` names it is answered 304.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol
from starlette.responses import Response

from app import __version__

MODES = ["text/plain", "application/json"]
BEARER = "bearer"
MAX_AGE_S = 300
"""How long a client may keep a card before it asks again: a card changes only when the
deployment does, and asking again costs a 304 while it has not."""


def agent_card(described: dict[str, Any], url: str, *, keys: bool, v03: bool) -> AgentCard:
    """The card of a profile as `app.catalog.describe_profile` describes it, served at `url`
    (`v03`: with the 0.3 interface)."""
    name = described["name"]
    tools = [tool["name"] for tool in described["tools"]]
    versions = (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3) if v03 else (PROTOCOL_VERSION_1_0,)
    skill = AgentSkill(
        id=name,
        name=name,
        description=described["description"],
        tags=["finishline", *tools],
        input_modes=MODES,
        output_modes=MODES,
    )
    card = AgentCard(
        name=name,
        description=described["description"],
        version=__version__,
        supported_interfaces=[
            AgentInterface(
                url=url,
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=version,
            )
            for version in versions
        ],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=False, extended_agent_card=False
        ),
        default_input_modes=MODES,
        default_output_modes=MODES,
        skills=[skill],
    )
    if keys:
        card.security_schemes[BEARER].CopyFrom(
            SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer",
                    description="A finishline API key, or an access token of its identity "
                    "provider; each task is visible to its key (or token owner) alone.",
                )
            )
        )
        card.security_requirements.append(SecurityRequirement(schemes={BEARER: StringList()}))
    return card


def card_response(card: AgentCard, if_none_match: str | None) -> Response:
    """The card as the SDK encodes it (with its 0.3 keys when it has a 0.3 interface), with
    its cache headers; 304 with no body when `if_none_match` names its ETag (or is `*`)."""
    body = json.dumps(
        agent_card_to_dict(card), ensure_ascii=False, allow_nan=False, separators=(",", ":")
    ).encode()
    etag = f'"{hashlib.sha256(body).hexdigest()[:32]}"'
    headers = {"ETag": etag, "Cache-Control": f"public, max-age={MAX_AGE_S}"}
    if if_none_match is not None and _names(if_none_match, etag):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


def _names(if_none_match: str, etag: str) -> bool:
    """Whether an If-None-Match value names `etag` (weak comparison, RFC 9110 §13.1.2)."""
    tags = [tag.strip() for tag in if_none_match.split(",")]
    return "*" in tags or any(tag.removeprefix("W/") == etag for tag in tags)
