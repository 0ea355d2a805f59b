"""`FINISHLINE_MCP_SERVERS`: the MCP servers a deployment offers, by name (DESIGN §11).

The value is JSON, or `@path` naming a JSON file: an object from server name to either a
Streamable HTTP server `{"url": "https://…/mcp", "headers": {…}}` or a stdio server
`{"command": ["prog", "arg"], "env": {…}, "cwd": "/dir"}`. Checked at start-up; a bad value
stops the service with a message naming the server and the field.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.jsonsource import json_setting

SERVER_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_)){0,31}$")
"""1 to 32 letters, digits, '-' or '_', starting with a letter or digit, no '__' (the
separator of `NAME__TOOL`)."""


class _ServerBase(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    connect_timeout_s: float = Field(
        10.0, gt=0, le=600, description="Connecting, the handshake and listing the tools."
    )
    retry_initial_s: float = Field(
        0.5, gt=0, le=600, description="First delay before reconnecting; doubles each failure."
    )
    retry_max_s: float = Field(30.0, gt=0, le=3600, description="Longest delay between attempts.")
    health_interval_s: float | None = Field(
        30.0,
        gt=0,
        le=86400,
        description="List the tools again this often on an idle session (finds a dead server "
        "before a call does); null: never.",
    )


class McpHttpServer(_ServerBase):
    """A Streamable HTTP server; its host must pass the HTTP allow-list."""

    url: str = Field(min_length=1, max_length=2000)
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value


class McpStdioServer(_ServerBase):
    """A server run as a child process, speaking MCP over its stdin and stdout."""

    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None

    @field_validator("command")
    @classmethod
    def _program(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the program (first item) must not be empty")
        return value


McpServerConfig = McpHttpServer | McpStdioServer


def parse_mcp_servers(value: Any) -> dict[str, McpServerConfig]:
    """The servers of `value` (JSON text, `@path`, or an already decoded mapping).

    Raises `ValueError` with one line per problem, each naming the server and the field.
    """
    value, source = json_setting(value, "FINISHLINE_MCP_SERVERS")
    if not isinstance(value, dict):
        raise ValueError(f"{source}: must be a JSON object of server name -> server")
    problems = [
        f"server name {name!r}: use 1 to 32 letters, digits, '-' or '_' (no '__')"
        for name in value
        if not isinstance(name, str) or not SERVER_NAME.fullmatch(name)
    ]
    for name, spec in value.items():
        if not isinstance(spec, dict):
            problems.append(f"server {name!r}: must be an object")
        elif ("url" in spec) == ("command" in spec):
            problems.append(f"server {name!r}: give either 'url' (HTTP) or 'command' (stdio)")
    if problems:
        raise ValueError(f"{source}: " + "; ".join(problems))
    typed = {
        name: McpHttpServer if "url" in spec else McpStdioServer for name, spec in value.items()
    }
    servers: dict[str, McpServerConfig] = {}
    for name, spec in value.items():
        try:
            servers[name] = typed[name].model_validate(spec)
        except ValidationError as exc:
            details = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'value'}: {error['msg']}"
                for error in exc.errors()
            )
            problems.append(f"server {name!r}: {details}")
    if problems:
        raise ValueError(f"{source}: " + "; ".join(problems))
    return servers
