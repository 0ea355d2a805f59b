"""A schema fetches nothing (issue #34, item 1): every JSON Schema a request, a profile or an
MCP server brings resolves only its own resources. A `$ref` that leaves the schema (an
`http://` URL, a `file://` path, a relative reference under a remote `$id`) is a 422 at POST
naming it, and neither the canary HTTP server (127.0.0.1, counting hits) nor the canary file
(watched with an audit hook on `open`) is ever touched, at POST or after; a `$ref` loop that
makes no progress into the value (`a → b → a`) is a 422 at POST too."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from mcp.types import Tool as McpToolInfo

from app.tools import base
from app.tools.mcp.source import McpTool
from tests.agui.kit import agent_input
from tests.agui.kit import scripted as agui_scripted
from tests.api.kit import error_of, finish, finishing, run_to_end, scripted, settings
from tests.fakes.service import api_client

_OPENED: list[str] = []
_WATCHED: set[str] = set()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and args and str(args[0]) in _WATCHED:
        _OPENED.append(str(args[0]))


sys.addaudithook(_audit)  # (for the process's life: it only looks at the watched paths)


class Canary:
    """A HTTP server on 127.0.0.1 serving a schema at any path, counting the requests."""

    def __init__(self) -> None:
        hits = self.hits = [0]

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits[0] += 1
                body = b'{"const": "the canary answered"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/schema+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def canary() -> Iterator[Canary]:
    served = Canary()
    served.thread.start()
    try:
        yield served
    finally:
        served.server.shutdown()
        served.server.server_close()


@pytest.fixture
def canary_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "canary.json"
    path.write_text('{"const": "the file was read"}')
    _WATCHED.add(str(path))
    _OPENED.clear()
    yield path
    _WATCHED.discard(str(path))


def _remote_schemas(canary: Canary, canary_file: Path) -> list[tuple[dict[str, Any], str]]:
    """(a schema reaching outside itself, what the 422 must name)."""
    return [
        ({"$ref": f"{canary.base}/x.json"}, f"{canary.base}/x.json"),
        ({"$ref": canary_file.as_uri()}, canary_file.as_uri()),
        (
            {"$id": f"{canary.base}/root.json", "properties": {"q": {"$ref": "other.json"}}},
            f"{canary.base}/other.json",
        ),
        (
            {"properties": {"q": {"$dynamicRef": f"{canary.base}/d.json"}}},
            f"{canary.base}/d.json",
        ),
        ({"properties": {"q": {"$ref": f"{canary.base}/n.json#/x"}}}, f"{canary.base}/n.json"),
    ]


def _tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "lookup",
        "description": "Look up.",
        "url": "https://api.example.com/lookup",
        "parameters": {"type": "object", **parameters},
    }


def _client_tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"name": "pick", "description": "Pick.", "parameters": {"type": "object", **parameters}}


def _bodies(schema: dict[str, Any]) -> dict[str, tuple[dict[str, Any], str]]:
    """Every place of POST /runs a schema goes: (the body, the field the 422 names)."""
    child = {"description": "Looks up.", "http_tools": [_tool(schema)]}
    return {
        "output_schema": (finishing(output_schema=schema), "output_schema"),
        "http_tools": (finishing(http_tools=[_tool(schema)]), "http_tools[0].parameters"),
        "client_tools": (finishing(client_tools=[_client_tool(schema)]), "client_tools"),
        "agents": (finishing(agents={"helper": child}), "agents.helper.http_tools[0].parameters"),
    }


@pytest.mark.parametrize("place", ["output_schema", "http_tools", "client_tools", "agents"])
async def test_a_reference_outside_the_schema_is_422_at_post_and_nothing_is_fetched(
    canary: Canary, canary_file: Path, place: str
) -> None:
    config = settings(http_tool_allow_hosts=["api.example.com", "127.0.0.1"])
    async with api_client(config) as client:
        for schema, named in _remote_schemas(canary, canary_file):
            body, field = _bodies(schema)[place]
            response = await client.post("/runs", json=body)

            error = error_of(response, 422, "validation_error")
            assert field in error["details"]["field"], error
            assert named in error["message"]
            assert "outside the schema" in error["message"]
    assert canary.hits == [0]
    assert _OPENED == []


async def test_an_ag_ui_frontend_tool_reaching_outside_its_schema_is_422_and_fetches_nothing(
    canary: Canary, canary_file: Path
) -> None:
    async with api_client(settings()) as client:
        for schema, named in _remote_schemas(canary, canary_file):
            body = agent_input(tools=[_client_tool(schema)], finishline=agui_scripted(finish()))
            response = await client.post(
                "/ag-ui", json=body, headers={"Accept": "text/event-stream"}
            )

            error = error_of(response, 422)
            assert error["details"]["field"] == "tools[0].parameters"
            assert named in error["message"]
    assert canary.hits == [0]
    assert _OPENED == []


async def test_a_profile_reaching_outside_its_schema_stops_start_up_and_fetches_nothing(
    canary: Canary, canary_file: Path
) -> None:
    for schema, named in _remote_schemas(canary, canary_file):
        profile = {"description": "Typed.", "output_schema": schema}
        with pytest.raises(ValueError, match="FINISHLINE_AGENTS") as raised:
            async with api_client(settings(agents={"typed": profile})):
                pass
        assert named in str(raised.value)
    assert canary.hits == [0]
    assert _OPENED == []


def test_an_mcp_tool_whose_schema_reaches_outside_it_is_refused_and_fetches_nothing(
    canary: Canary, canary_file: Path
) -> None:
    for schema, named in _remote_schemas(canary, canary_file):
        info = McpToolInfo(name="t", inputSchema={"type": "object", **schema})
        with pytest.raises(ValueError, match="outside the schema") as raised:
            McpTool("srv__t", info, connection=None)  # type: ignore[arg-type]
        assert named in str(raised.value)
    assert canary.hits == [0]
    assert _OPENED == []


def test_a_validator_never_fetches_even_a_reference_the_check_let_through(
    canary: Canary, canary_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from referencing.exceptions import Unresolvable

    monkeypatch.setattr(base, "reference_problem", lambda schema: None)
    base._COMPILED.clear()
    try:
        for schema, _ in _remote_schemas(canary, canary_file):
            compiled = base.compiled_schema({"type": "object", **schema, "title": "unchecked"})
            assert compiled.validator is not None
            with pytest.raises(Unresolvable):
                list(compiled.validator.iter_errors({"q": 1}))
    finally:
        base._COMPILED.clear()
    assert canary.hits == [0]
    assert _OPENED == []


@pytest.mark.parametrize(
    ("schema", "chain"),
    [
        (
            {
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                "$ref": "#/$defs/a",
            },
            "$defs.a → $defs.b → $defs.a",
        ),
        ({"$ref": "#"}, "(root) → (root)"),
        ({"anyOf": [{"type": "null"}, {"allOf": [{"$ref": "#/anyOf/1"}]}]}, "anyOf[1]"),
        (
            {
                "$defs": {
                    "a": {"$id": "urn:a", "$ref": "urn:b"},
                    "b": {"$id": "urn:b", "$ref": "urn:a"},
                },
                "properties": {"q": {"$ref": "urn:a"}},
            },
            "$defs.a → $defs.b → $defs.a",
        ),
    ],
    ids=["a-b-a", "root-itself", "through-applicators", "by-id"],
)
async def test_a_reference_loop_without_progress_is_422_at_post(
    schema: dict[str, Any], chain: str
) -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json=finishing(output_schema=schema))
        tool = await client.post("/runs", json=finishing(client_tools=[_client_tool(schema)]))

    error = error_of(response, 422, "validation_error")
    assert error["details"]["field"] == "output_schema"
    assert "references loop without going into the value" in error["message"]
    assert chain in error["message"]
    assert "references loop" in error_of(tool, 422, "validation_error")["message"]


async def test_references_that_go_into_the_value_or_stay_in_the_schema_still_work() -> None:
    tree = {
        "$id": "https://example.com/tree.json",
        "type": "object",
        "properties": {
            "name": {"$ref": "#/$defs/name"},
            "children": {"type": "array", "items": {"$ref": "#"}},
            "tag": {"$ref": "tag.json"},
        },
        "required": ["name"],
        "$defs": {
            "name": {"type": "string"},
            "tag": {"$id": "tag.json", "$anchor": "t", "enum": ["a", "b"]},
        },
    }
    answer = {"name": "root", "tag": "a", "children": [{"name": "leaf", "children": []}]}
    wrong = {"name": "root", "children": [{"name": 3}]}
    reply = {"tool_calls": [{"name": "task_finished", "arguments": {"answer": answer}}]}
    again = {"tool_calls": [{"name": "task_finished", "arguments": {"answer": wrong}}]}
    async with api_client(settings()) as client:
        good = await run_to_end(client, scripted(reply, output_schema=tree))
        bad = await run_to_end(
            client, scripted(again, again, output_schema=tree, settings={"max_output_retries": 1})
        )
    assert good["status"] == "completed"
    assert good["result"]["output"]["children"][0]["name"] == "leaf"
    assert bad["result"]["output_errors"][0]["path"] == "$.children[0].name"
