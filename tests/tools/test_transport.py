"""The guarded transport itself: every host checked, every new connection resolved through
the guard and made to the address it checked."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from app.tools.base import ToolError
from app.tools.netguard import BlockedHostError, NetworkGuard
from app.tools.transport import ResponseTooLargeError, guarded_client
from tests.fakes.serving import Served
from tests.tools.conftest import FakeDNS
from tests.tools.local_server import BIG_BODY_BYTES, LocalServer


async def test_connections_go_to_the_address_the_guard_resolved(
    server: LocalServer, dns: FakeDNS
) -> None:
    """`app.test` exists only in the fake DNS: an answer proves no other lookup was made."""
    async with guarded_client(NetworkGuard(["app.test"], dns)) as client:
        response = await client.get(server.url("/echo", host="app.test"))

    assert response.json()["headers"]["host"] == f"app.test:{server.port}"
    assert dns.lookups == ["app.test"]


async def test_every_new_connection_asks_the_guard_again(server: LocalServer, dns: FakeDNS) -> None:
    """No DNS cache: an answer that changes (rebinding) is seen, and checked, at once; a
    kept-alive connection is reused without a lookup."""
    async with guarded_client(NetworkGuard(["app.test"], dns)) as client:
        kept = await client.get(server.url("/text", host="app.test"))
        closed = await client.get(
            server.url("/text", host="app.test"), headers={"Connection": "close"}
        )
        del dns.records["app.test"]
        with pytest.raises(ToolError, match=r"could not resolve host 'app\.test'"):
            await client.get(server.url("/text", host="app.test"))

    assert (kept.status_code, closed.status_code) == (200, 200)
    assert dns.lookups == ["app.test", "app.test"]


@pytest.mark.parametrize(
    "url", ["http://10.0.0.1/", "http://[::1]:9/", "http://169.254.169.254/latest/meta-data/"]
)
async def test_ip_literals_are_checked_by_the_transport_itself(url: str) -> None:
    """aiohttp connects to an IP literal without asking a resolver: the transport checks."""
    async with guarded_client(NetworkGuard(["*"])) as client:
        with pytest.raises(BlockedHostError, match="address"):
            await client.get(url)


async def test_hosts_not_in_the_allow_list_are_refused_before_any_lookup(dns: FakeDNS) -> None:
    async with guarded_client(NetworkGuard(["app.test"], dns)) as client:
        with pytest.raises(BlockedHostError, match="not in the HTTP allow-list"):
            await client.get("http://internal.test/")

    assert dns.lookups == []


async def test_a_cookie_an_endpoint_sets_is_never_sent_again() -> None:
    """The client is shared by every run: a kept cookie would cross from run to run."""
    app = Starlette(routes=[Route("/", _sets_a_cookie)])
    async with Served(app) as served, guarded_client(NetworkGuard(["127.0.0.1"])) as client:
        first = await client.get(served.url("/"))
        second = await client.get(served.url("/"))

    assert first.headers["set-cookie"].startswith("session=abc")
    assert (first.text, second.text) == ("", "")
    assert not client.cookies


async def _sets_a_cookie(request: Request) -> Response:
    response = PlainTextResponse(request.headers.get("cookie", ""))
    response.set_cookie("session", "abc")
    return response


async def test_a_client_with_a_response_cap_reads_no_body_past_it(server: LocalServer) -> None:
    """`/big` is 10,000 bytes: refused by a 9,999-byte cap (its Content-Length says so before
    any of it is read), read whole by a 10,000-byte one."""
    guard = NetworkGuard(["127.0.0.1"])
    async with guarded_client(guard, max_response_bytes=BIG_BODY_BYTES - 1) as capped:
        with pytest.raises(ResponseTooLargeError, match="longer than the 9,999 bytes read"):
            await capped.get(server.url("/big"))
    async with guarded_client(guard, max_response_bytes=BIG_BODY_BYTES) as enough:
        response = await enough.get(server.url("/big"))
    assert len(response.content) == BIG_BODY_BYTES
