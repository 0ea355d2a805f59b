"""`AiohttpTransport` behind an httpx client, against a real local server: what callers rely
on from httpx (bodies both ways, status and reason, timeouts, errors as httpx's) holds."""

from __future__ import annotations

import inspect
import socket
from collections.abc import AsyncIterator

import aiohttp
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from app.http_transport import AIOHTTP_ERRORS, AiohttpTransport
from tests.fakes.serving import Served
from tests.tools.local_server import BIG_BODY_BYTES, LocalServer


@pytest.fixture
async def server() -> AsyncIterator[LocalServer]:
    async with LocalServer() as local:
        yield local


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=AiohttpTransport(), timeout=5.0) as http:
        yield http


def _aiohttp_client_errors() -> list[type[Exception]]:
    return [
        value
        for value in vars(aiohttp).values()
        if inspect.isclass(value) and issubclass(value, aiohttp.ClientError)
    ]


@pytest.mark.parametrize("error", _aiohttp_client_errors(), ids=lambda error: error.__name__)
def test_every_aiohttp_client_error_maps_to_a_specific_httpx_error(
    error: type[Exception],
) -> None:
    target = next(target for source, target in AIOHTTP_ERRORS if issubclass(error, source))
    assert target is not httpx.TransportError or error is aiohttp.ClientError


def test_no_entry_of_the_error_map_is_hidden_behind_an_earlier_one() -> None:
    for index, (source, _) in enumerate(AIOHTTP_ERRORS):
        for earlier, _ in AIOHTTP_ERRORS[:index]:
            assert not issubclass(source, earlier), f"{source} is caught first as {earlier}"


async def test_json_body_goes_out_and_the_response_comes_back(
    server: LocalServer, client: httpx.AsyncClient
) -> None:
    response = await client.post(server.url("/echo?a=1"), json={"x": [1, "é"]})

    assert (response.status_code, response.reason_phrase) == (200, "OK")
    echoed = response.json()
    assert (echoed["method"], echoed["query"], echoed["json"]) == (
        "POST",
        {"a": "1"},
        {"x": [1, "é"]},
    )
    assert echoed["headers"]["content-type"] == "application/json"


async def test_a_streamed_request_body_arrives_whole(
    server: LocalServer, client: httpx.AsyncClient
) -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b'{"a": '
        yield b"1}"

    response = await client.post(server.url("/echo"), content=parts())

    assert response.json()["json"] == {"a": 1}


async def test_the_headers_sent_are_the_requests_own(
    server: LocalServer, client: httpx.AsyncClient
) -> None:
    response = await client.get(server.url("/echo"), headers={"X-Run": "r1"})

    headers = response.json()["headers"]
    assert headers["x-run"] == "r1"
    assert headers["user-agent"].startswith("python-httpx/")
    assert "content-type" not in headers  # aiohttp adds none of its own


async def test_a_body_read_in_part_then_closed_leaves_the_pool_usable(
    server: LocalServer, client: httpx.AsyncClient
) -> None:
    async with client.stream("GET", server.url("/big")) as response:
        async for chunk in response.aiter_bytes():
            assert chunk
            break

    assert len((await client.get(server.url("/big"))).content) == BIG_BODY_BYTES


async def test_an_unanswered_request_is_a_read_timeout(server: LocalServer) -> None:
    async with httpx.AsyncClient(transport=AiohttpTransport(), timeout=0.2) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(server.url("/hang"))


async def test_a_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as sock:  # bound, never listening: connecting is refused
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        async with httpx.AsyncClient(transport=AiohttpTransport()) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(url)


async def _sets_a_cookie(request: Request) -> Response:
    response = PlainTextResponse(request.headers.get("cookie", ""))
    response.set_cookie("session", "abc")
    return response


async def test_the_transport_keeps_no_cookies_between_requests() -> None:
    """httpx's client keeps cookies if its owner wants them; a jar in the transport would
    carry one run's cookies into every other run's requests."""
    app = Starlette(routes=[Route("/", _sets_a_cookie)])
    transport = AiohttpTransport()
    try:
        async with Served(app) as served:
            for _ in range(2):
                response = await transport.handle_async_request(
                    httpx.Request("GET", served.url("/", host="localhost"))
                )
                assert response.headers["set-cookie"].startswith("session=abc")
                assert await response.aread() == b""  # no cookie came back
    finally:
        await transport.aclose()


async def _large_header(request: Request) -> Response:
    return PlainTextResponse("ok", headers={"Content-Security-Policy": "a" * 12_000})


async def test_a_response_header_as_long_as_httpcore_took_is_read() -> None:
    """Real sites send long headers (policies, cookies); h11 takes a 16 KiB block."""
    app = Starlette(routes=[Route("/", _large_header)])
    async with (
        Served(app) as served,
        httpx.AsyncClient(transport=AiohttpTransport()) as client,
    ):
        response = await client.get(served.url("/"))

    assert len(response.headers["content-security-policy"]) == 12_000


async def test_a_closed_transport_refuses_new_requests(server: LocalServer) -> None:
    transport = AiohttpTransport()
    await transport.aclose()

    with pytest.raises(RuntimeError, match="closed"):
        await transport.handle_async_request(httpx.Request("GET", server.url("/text")))
