"""HttpTool (declared in a request) against a real local server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.engine.ports import ToolContext
from app.tools.base import ToolError
from app.tools.fetcher import HttpFetcher
from app.tools.http import HttpTool
from app.tools.netguard import BlockedHostError, NetworkGuard
from tests.tools.conftest import FakeDNS
from tests.tools.local_server import LocalServer

LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["q"],
}


@pytest.fixture
async def fetcher(dns: FakeDNS) -> AsyncIterator[HttpFetcher]:
    guarded = HttpFetcher(NetworkGuard(["127.0.0.1", "app.test"], dns), timeout_s=5.0)
    yield guarded
    await guarded.aclose()


def make_tool(fetcher: HttpFetcher, url: str, **options: Any) -> HttpTool:
    options.setdefault("parameters", LOOKUP_SCHEMA)
    return HttpTool(name="lookup", description="Look it up.", url=url, fetcher=fetcher, **options)


async def test_http_tool_posts_the_arguments_as_a_json_body_with_its_headers(
    server: LocalServer, fetcher: HttpFetcher, ctx: ToolContext
) -> None:
    tool = make_tool(fetcher, server.url("/echo"), headers={"X-Api-Key": "secret"})
    arguments = {"q": "weather", "n": 3}
    assert tool.validate(arguments) is None

    echoed = json.loads(await tool.call(arguments, ctx))

    assert echoed["method"] == "POST"
    assert echoed["json"] == arguments
    assert echoed["headers"]["content-type"] == "application/json"
    assert echoed["headers"]["x-api-key"] == "secret"


@pytest.mark.parametrize("method", ["GET", "delete"])
async def test_http_tool_sends_get_and_delete_arguments_as_query_parameters(
    method: str, server: LocalServer, fetcher: HttpFetcher, ctx: ToolContext
) -> None:
    tool = make_tool(
        fetcher, server.url("/echo?fixed=1"), method=method, parameters={"type": "object"}
    )
    arguments = {"q": "a b", "n": 3, "tags": ["x", "y"], "on": True, "none": None}

    echoed = json.loads(await tool.call(arguments, ctx))

    assert echoed["method"] == method.upper()
    assert echoed["json"] is None
    assert echoed["query"] == {
        "fixed": "1",
        "q": "a b",
        "n": "3",
        "tags": '["x", "y"]',
        "on": "true",
        "none": "null",
    }


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
async def test_http_tool_sends_put_and_patch_arguments_as_json(
    method: str, server: LocalServer, fetcher: HttpFetcher, ctx: ToolContext
) -> None:
    tool = make_tool(fetcher, server.url("/echo"), method=method)
    echoed = json.loads(await tool.call({"q": "x"}, ctx))
    assert (echoed["method"], echoed["json"]) == (method, {"q": "x"})


@pytest.mark.parametrize("status", [400, 404, 500, 503])
async def test_http_tool_raises_a_tool_error_with_the_status_and_body_on_non_2xx(
    status: int, server: LocalServer, fetcher: HttpFetcher, ctx: ToolContext
) -> None:
    tool = make_tool(fetcher, server.url(f"/status/{status}"))
    with pytest.raises(ToolError, match=rf"^lookup answered HTTP {status} .*: the server says"):
        await tool.call({"q": "x"}, ctx)


async def test_http_tool_says_so_when_a_2xx_body_is_empty(
    server: LocalServer, fetcher: HttpFetcher, ctx: ToolContext
) -> None:
    tool = make_tool(fetcher, server.url("/empty"))
    assert await tool.call({"q": "x"}, ctx) == "(empty body, HTTP 204 No Content)"


async def test_http_tool_cuts_the_body_at_the_fetchers_size_cap(
    server: LocalServer, ctx: ToolContext
) -> None:
    small = HttpFetcher(NetworkGuard(["127.0.0.1"]), max_bytes=100)
    try:
        tool = make_tool(small, server.url("/big"), method="GET")
        assert await tool.call({"q": "x"}, ctx) == "x" * 100 + "\n\n[Body cut at 100 bytes.]"
    finally:
        await small.aclose()


async def test_http_tool_drops_its_headers_when_a_redirect_leaves_the_origin(
    server: LocalServer, fetcher: HttpFetcher, ctx: ToolContext
) -> None:
    tool = make_tool(
        fetcher,
        server.url("/redirect"),
        method="GET",
        headers={"X-Api-Key": "secret"},
        parameters={"type": "object"},
    )
    same_origin = json.loads(await tool.call({"to": server.url("/echo")}, ctx))
    other_origin = json.loads(await tool.call({"to": server.url("/echo", host="app.test")}, ctx))
    assert same_origin["headers"]["x-api-key"] == "secret"
    assert "x-api-key" not in other_origin["headers"]
    assert other_origin["headers"]["host"] == f"app.test:{server.port}"


async def test_http_tool_keeps_a_post_body_across_a_307_redirect(
    server: LocalServer, fetcher: HttpFetcher, ctx: ToolContext
) -> None:
    url = server.url(f"/redirect?code=307&to={server.url('/echo')}")
    echoed = json.loads(await make_tool(fetcher, url).call({"q": "kept"}, ctx))
    assert (echoed["method"], echoed["json"]) == ("POST", {"q": "kept"})


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://10.0.0.1/api", "not in the HTTP allow-list"),
        ("http://internal.test/api", "not in the HTTP allow-list"),
    ],
)
async def test_http_tool_refuses_a_url_the_allow_list_does_not_open(
    url: str, message: str, fetcher: HttpFetcher, ctx: ToolContext
) -> None:
    with pytest.raises(BlockedHostError, match=message):
        await make_tool(fetcher, url).call({"q": "x"}, ctx)


async def test_http_tool_gives_up_after_its_own_timeout(
    server: LocalServer, fetcher: HttpFetcher, ctx: ToolContext
) -> None:
    tool = make_tool(fetcher, server.url("/hang"), method="GET", timeout_s=0.2)
    with pytest.raises(ToolError, match=r"timed out after 0\.2 s"):
        await tool.call({"q": "x"}, ctx)


async def test_http_tool_validates_arguments_against_its_declared_schema(
    fetcher: HttpFetcher,
) -> None:
    tool = make_tool(fetcher, "http://127.0.0.1/")
    assert tool.validate({"n": 1}) == "'q' is a required property"
    assert tool.validate({"q": "x", "n": "one"}) == "at 'n': 'one' is not of type 'integer'"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"method": "TRACE"}, "unsupported method 'TRACE'"),
        ({"timeout_s": 0}, "timeout_s of tool 'lookup' must be positive"),
        ({"parameters": {"type": "objekt"}}, "not a valid JSON schema"),
        ({"name": "bad name"}, "invalid tool name"),
    ],
)
async def test_http_tool_refuses_an_invalid_declaration(
    options: dict[str, Any], message: str, fetcher: HttpFetcher
) -> None:
    options.setdefault("name", "lookup")
    with pytest.raises(ValueError, match=message):
        HttpTool(description="d", url="http://127.0.0.1/", fetcher=fetcher, **_with_schema(options))


def _with_schema(options: dict[str, Any]) -> dict[str, Any]:
    return {"parameters": LOOKUP_SCHEMA, **options}


async def test_http_tool_is_idempotent_unless_declared_otherwise(fetcher: HttpFetcher) -> None:
    assert make_tool(fetcher, "http://127.0.0.1/").idempotent is True
    assert make_tool(fetcher, "http://127.0.0.1/", idempotent=False).idempotent is False
