"""http_get against a real local server: the guard, redirects, the size cap, decoding."""

from __future__ import annotations

import re
import socket
from collections.abc import Sequence

import httpx
import pytest

from app.engine.ports import ToolContext
from app.tools.base import ToolError
from app.tools.netguard import BlockedHostError
from app.tools.registry import builtin_registry
from tests.tools.conftest import FakeDNS
from tests.tools.local_server import LocalServer


async def http_get(
    url: str,
    ctx: ToolContext,
    *,
    allow: Sequence[str] = ("127.0.0.1",),
    dns: FakeDNS | None = None,
    max_bytes: int = 1_000_000,
    timeout_s: float = 5.0,
) -> str:
    registry = builtin_registry(
        http_allow_hosts=allow, http_max_bytes=max_bytes, http_timeout_s=timeout_s, resolver=dns
    )
    async with registry:
        tool = registry.get("http_get")
        assert tool.validate({"url": url}) is None
        return await tool.call({"url": url}, ctx)


async def test_http_get_returns_status_line_content_type_and_body(
    server: LocalServer, ctx: ToolContext
) -> None:
    result = await http_get(server.url("/text"), ctx)
    assert result == (
        "HTTP 200 OK\nContent-Type: text/plain; charset=utf-8\n\nhello from the test server"
    )


async def test_http_get_returns_an_error_status_with_its_body_as_a_result(
    server: LocalServer, ctx: ToolContext
) -> None:
    result = await http_get(server.url("/status/404"), ctx)
    assert result.startswith("HTTP 404 Not Found\n")
    assert result.endswith("\n\nthe server says 404")


async def test_http_get_cuts_the_body_at_max_bytes_and_says_so(
    server: LocalServer, ctx: ToolContext
) -> None:
    result = await http_get(server.url("/big"), ctx, max_bytes=1_000)
    body = result.split("\n\n", 1)[1]
    assert body == "x" * 1_000 + "\n\n[Body cut at 1,000 bytes.]"


async def test_http_get_decodes_the_body_per_its_charset(
    server: LocalServer, ctx: ToolContext
) -> None:
    assert (await http_get(server.url("/latin1"), ctx)).endswith("\n\ncafé crème")


async def test_http_get_does_not_show_a_binary_body(server: LocalServer, ctx: ToolContext) -> None:
    result = await http_get(server.url("/binary"), ctx)
    assert result.endswith("[Binary body (image/png), 160 bytes; not shown.]")


async def test_http_get_follows_redirects_between_allowed_hosts(
    server: LocalServer, ctx: ToolContext
) -> None:
    url = server.url(f"/redirect?to={server.url('/text')}&code=301")
    result = await http_get(url, ctx)
    assert result.startswith(f"HTTP 200 OK\nURL: {server.url('/text')}\n")
    assert result.endswith("hello from the test server")


async def test_http_get_stops_after_five_redirects(server: LocalServer, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="stopped after 5 redirects"):
        await http_get(server.url("/loop"), ctx)


@pytest.mark.parametrize(
    "target", ["http://10.0.0.1/", "http://169.254.169.254/latest/meta-data/", "file:///etc/passwd"]
)
async def test_http_get_refuses_a_redirect_from_an_allowed_server_to_a_disallowed_url(
    target: str, server: LocalServer, ctx: ToolContext
) -> None:
    with pytest.raises(BlockedHostError):
        await http_get(server.url(f"/redirect?to={target}"), ctx, allow=["127.0.0.1", "*"])


async def test_http_get_refuses_a_redirect_to_a_hostname_resolving_to_a_private_address(
    server: LocalServer, ctx: ToolContext, dns: FakeDNS
) -> None:
    target = server.url("/text", host="loopback.test")
    with pytest.raises(BlockedHostError, match=re.escape("'loopback.test' resolves to 127.0.0.1")):
        await http_get(server.url(f"/redirect?to={target}"), ctx, allow=["127.0.0.1", "*"], dns=dns)


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1:9/", "loopback"),
        ("http://10.0.0.1/", "private"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[::ffff:127.0.0.1]:9/", "loopback"),
    ],
)
async def test_http_get_refuses_non_public_addresses_under_a_wildcard_allow_list(
    url: str, kind: str, ctx: ToolContext
) -> None:
    with pytest.raises(BlockedHostError, match=f"is an? {kind} address"):
        await http_get(url, ctx, allow=["*"])


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9/", "http://10.0.0.1/", "http://169.254.169.254/", "http://a.io/"]
)
async def test_http_get_refuses_hosts_not_in_the_allow_list(url: str, ctx: ToolContext) -> None:
    with pytest.raises(BlockedHostError, match="is not in the HTTP allow-list"):
        await http_get(url, ctx, allow=["api.example.com"])


@pytest.mark.parametrize("host", ["internal.test", "metadata.test", "loopback.test"])
@pytest.mark.parametrize("allow", [["*"], ["*.test"]])
async def test_http_get_refuses_a_hostname_resolving_to_a_private_address_via_a_wildcard(
    host: str, allow: list[str], server: LocalServer, ctx: ToolContext, dns: FakeDNS
) -> None:
    with pytest.raises(BlockedHostError, match=f"'{host}' resolves to"):
        await http_get(server.url("/text", host=host), ctx, allow=allow, dns=dns)


async def test_http_get_refuses_a_host_when_any_of_its_addresses_is_private(
    ctx: ToolContext, dns: FakeDNS
) -> None:
    with pytest.raises(BlockedHostError, match=re.escape("'mixed.test' resolves to 10.0.0.1")):
        await http_get("http://mixed.test/", ctx, allow=["*"], dns=dns)


async def test_http_get_reaches_a_private_address_when_the_hostname_is_listed_explicitly(
    server: LocalServer, ctx: ToolContext, dns: FakeDNS
) -> None:
    # app.test exists only in the injected resolver: success proves the connection went to
    # the address that was resolved and checked, not to a second, independent lookup.
    result = await http_get(server.url("/text", host="app.test"), ctx, allow=["app.test"], dns=dns)
    assert result.endswith("hello from the test server")
    assert dns.lookups == ["app.test"]


async def test_http_get_times_out_with_a_tool_error(server: LocalServer, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=r"the request to 127\.0\.0\.1 timed out after 0\.2 s"):
        await http_get(server.url("/hang"), ctx, timeout_s=0.2)


async def test_http_get_reports_a_refused_connection_as_a_tool_error(ctx: ToolContext) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(ToolError, match=re.escape("could not connect to 127.0.0.1")):
        await http_get(f"http://127.0.0.1:{port}/", ctx)


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "file:///etc/passwd", "127.0.0.1/text"])
async def test_http_get_refuses_schemes_other_than_http_and_https(
    url: str, ctx: ToolContext
) -> None:
    with pytest.raises(BlockedHostError, match="only http and https URLs may be fetched"):
        await http_get(url, ctx, allow=["*", "127.0.0.1"])


async def test_http_get_with_a_client_passed_in_checks_resolved_addresses_before_sending(
    server: LocalServer, ctx: ToolContext, dns: FakeDNS
) -> None:
    async with httpx.AsyncClient(follow_redirects=True) as client:
        registry = builtin_registry(
            http_allow_hosts=["*", "127.0.0.1"], client=client, resolver=dns
        )
        tool = registry.get("http_get")
        assert (await tool.call({"url": server.url("/text")}, ctx)).endswith("test server")
        with pytest.raises(
            BlockedHostError, match=re.escape("'internal.test' resolves to 10.0.0.1")
        ):
            await tool.call({"url": "http://internal.test/"}, ctx)
        redirect = server.url("/redirect?to=http://internal.test/")
        with pytest.raises(
            BlockedHostError, match=re.escape("'internal.test' resolves to 10.0.0.1")
        ):
            await tool.call({"url": redirect}, ctx)
        await registry.aclose()
