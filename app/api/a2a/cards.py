"""An agent profile's A2A agent card (DESIGN §17), built with the protocol's own models.

One skill, the profile: its name, description and tools (as tags, with `finishline`), text and
JSON in and out. Capabilities: streaming, no push notifications, no extended card. Two
interfaces at one URL, `/a2a/NAME`: JSON-RPC at protocol 1.0, and JSON-RPC at 0.3 (the SDK's
compatibility layer; a 0.3 client reads the card's top-level `url` and `protocolVersion`, which
the SDK's encoder writes from that interface). With API keys, the card declares an HTTP
bearer scheme and requires it. The URL is the one the card was asked for at (the request's
scheme and Host: behind a proxy, forward them).
"""

from __future__ import annotations

from typing import Any

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

from app import __version__

MODES = ["text/plain", "application/json"]
BEARER = "bearer"


def agent_card(described: dict[str, Any], url: str, *, keys: bool) -> AgentCard:
    """The card of a profile as `app.catalog.describe_profile` describes it, served at `url`."""
    name = described["name"]
    tools = [tool["name"] for tool in described["tools"]]
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
            for version in (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)
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
