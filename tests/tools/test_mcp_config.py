"""FINISHLINE_MCP_SERVERS parsing, tool names and result rendering: the pure parts of the MCP
source (the live parts are in test_mcp_source.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from pydantic import ValidationError

from app.tools.base import TOOL_NAME_PATTERN, ToolError
from app.tools.mcp.config import McpHttpServer, McpStdioServer, parse_mcp_servers
from app.tools.mcp.content import render_result
from app.tools.mcp.naming import exposed_name
from tests.fakes.service import service_settings

HTTP = {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer x"}}
STDIO = {"command": ["npx", "server"], "env": {"A": "1"}, "cwd": "/srv"}


def test_json_with_both_kinds_of_server() -> None:
    servers = parse_mcp_servers(json.dumps({"docs": HTTP, "files": STDIO}))
    assert servers["docs"] == McpHttpServer(**HTTP)
    assert servers["files"] == McpStdioServer(command=["npx", "server"], env={"A": "1"}, cwd="/srv")
    assert servers["files"].retry_initial_s == 0.5


def test_at_path_reads_a_json_file(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"docs": HTTP}), encoding="utf-8")
    assert list(parse_mcp_servers(f"@{path}")) == ["docs"]


def test_empty_means_no_servers() -> None:
    assert parse_mcp_servers("") == {}
    assert parse_mcp_servers("  ") == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{not json", "FINISHLINE_MCP_SERVERS: invalid JSON"),
        ("[]", "must be a JSON object of server name -> server"),
        ('{"a__b": {"url": "http://h/mcp"}}', "server name 'a__b'"),
        ('{"": {"url": "http://h/mcp"}}', "server name ''"),
        ('{"x y": {"url": "http://h/mcp"}}', "server name 'x y'"),
        ('{"s": {"url": "http://h/mcp", "command": ["x"]}}', "server 's': give either 'url'"),
        ('{"s": {}}', "server 's': give either 'url' (HTTP) or 'command' (stdio)"),
        ('{"s": 3}', "server 's': must be an object"),
        ('{"s": {"url": "ftp://h/mcp"}}', "server 's': url: Value error, must be an http"),
        ('{"s": {"command": []}}', "server 's': command: List should have at least 1 item"),
        ('{"s": {"command": ["x"], "envv": {}}}', "server 's': envv: Extra inputs"),
        ('{"s": {"url": "http://h", "headers": {"a": 1}}}', "server 's': headers.a: Input"),
    ],
)
def test_bad_values_name_the_server_and_the_field(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_mcp_servers(value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"file '.*nope\.json': cannot read it"):
        parse_mcp_servers(f"@{tmp_path / 'nope.json'}")


def test_settings_read_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FINISHLINE_MCP_SERVERS", json.dumps({"docs": HTTP}))
    assert list(service_settings().mcp_servers) == ["docs"]
    monkeypatch.setenv("FINISHLINE_MCP_SERVERS", '{"docs": {"url": "gopher://x"}}')
    with pytest.raises(ValidationError, match="server 'docs': url"):
        service_settings()


# -- names --------------------------------------------------------------------------------------


def test_names_are_server__tool() -> None:
    assert exposed_name("docs", "search") == "docs__search"


def test_long_or_odd_names_are_shortened_with_a_stable_hash() -> None:
    long = exposed_name("docs", "x" * 80)
    assert TOOL_NAME_PATTERN.fullmatch(long)
    assert len(long) == 64
    assert long.startswith("docs__xxx")
    assert long == exposed_name("docs", "x" * 80)
    assert long != exposed_name("docs", "x" * 81)
    dotted = exposed_name("fs", "files.read")
    assert TOOL_NAME_PATTERN.fullmatch(dotted)
    assert dotted.startswith("fs__files_read_")
    assert dotted != exposed_name("fs", "files_read")


# -- results ------------------------------------------------------------------------------------


def result(*content: object, structured: object = None, error: bool = False) -> CallToolResult:
    return CallToolResult(content=list(content), structured_content=structured, is_error=error)  # type: ignore[arg-type]


def test_text_parts_are_joined() -> None:
    text = result(TextContent(type="text", text="a"), TextContent(type="text", text="b"))
    assert render_result("t", text) == "a\n\nb"


def test_structured_content_without_text_is_json() -> None:
    assert json.loads(render_result("t", result(structured={"x": [1, 2]}))) == {"x": [1, 2]}


def test_other_content_is_described() -> None:
    shown = render_result(
        "t",
        result(
            ImageContent(type="image", data="aGVsbG8=", mime_type="image/png"),
            AudioContent(type="audio", data="aGk=", mime_type="audio/wav"),
            ResourceLink(type="resource_link", name="doc", uri="file:///doc.txt"),
            EmbeddedResource(
                type="resource", resource=TextResourceContents(uri="file:///a", text="inline")
            ),
            EmbeddedResource(
                type="resource",
                resource=BlobResourceContents(uri="file:///b", blob="aGk=", mime_type="x/y"),
            ),
        ),
    )
    assert shown.split("\n\n") == [
        "[image (image/png), 5 bytes; not shown]",
        "[audio (audio/wav), 2 bytes; not shown]",
        "[resource link 'doc': file:///doc.txt]",
        "[resource file:///a]\ninline",
        "[resource file:///b (x/y), 2 bytes; not shown]",
    ]


def test_empty_and_error_results() -> None:
    assert render_result("t", result()) == "(the tool returned no content)"
    with pytest.raises(ToolError, match=r"^no such file$"):
        render_result("t", result(TextContent(type="text", text="no such file"), error=True))
    with pytest.raises(ToolError, match="t reported an error without a message"):
        render_result("t", result(error=True))
