"""Every spelling of a refused address is refused (DESIGN §15: allow-listed like HTTP tools):
an IP literal is read as the resolver and the socket read it (`parse_ip`: `inet_aton`'s
shorthand forms, `2130706433`, `0x7f.1`, `127.1`, `0177.0.0.1`; IPv6 in any of its forms) and
`localhost` names the loopback address (RFC 6761). One reading serves the pure check a
request's URLs meet at POST (`a2a_url`, `http_tools[].url`, `webhook`: 422 naming the field
and the address) and the guarded transport's check at connect time.

The resolver's own reading is the oracle: `getaddrinfo(host, AI_NUMERICHOST)`, which parses a
numeric host without any lookup (glibc: `inet_aton`'s forms for IPv4). Hypothesis draws
spellings with a fixed seed (`derandomize`): the same examples on every run."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.tools.netguard import (
    AllowList,
    BlockedHostError,
    NetworkGuard,
    check_url_allowed,
    non_public_kind,
    parse_ip,
)
from app.tools.transport import guarded_client
from tests.api.kit import error_of, finishing
from tests.api.kit import settings as app_settings
from tests.fakes.service import api_client

SEEDED = settings(derandomize=True, database=None, max_examples=400, deadline=None)

REFUSED = [
    "127.0.0.1",
    "127.255.255.254",
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "169.254.169.254",
    "0.0.0.0",
    "100.64.0.1",
    "224.0.0.1",
    "255.255.255.255",
]
PUBLIC = ["8.8.8.8", "93.184.216.34", "1.1.1.1"]


def resolver_reads(host: str) -> str | None:
    """The address the system resolver reads `host` as, without a lookup; None for a name."""
    try:
        infos = socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST)
    except (OSError, UnicodeError):
        return None
    return str(ipaddress.ip_address(str(infos[0][4][0]).split("%")[0]))


def render(value: int, base: str, upper: bool, zeros: int) -> str:
    """One part of an `inet_aton` spelling."""
    if base == "hex":
        digits = "0" * zeros + format(value, "X" if upper else "x")
        return ("0X" if upper else "0x") + digits
    if base == "oct":
        return "0" + "0" * zeros + format(value, "o")
    return str(value)


@st.composite
def spellings(draw: Any, addresses: st.SearchStrategy[str]) -> tuple[str, str]:
    """(an address, a spelling of it `inet_aton` takes: 1 to 4 parts, each decimal, octal or
    hex, the last filling the bytes left)."""
    address = draw(addresses)
    number = int(ipaddress.IPv4Address(address))
    count = draw(st.integers(1, 4))
    octets = list(number.to_bytes(4, "big"))
    values = [*octets[: count - 1], int.from_bytes(bytes(octets[count - 1 :]), "big")]
    parts = [
        render(
            value,
            draw(st.sampled_from(["dec", "oct", "hex"])),
            draw(st.booleans()),
            draw(st.integers(0, 3)),
        )
        for value in values
    ]
    return address, ".".join(parts)


@SEEDED
@given(spellings(st.sampled_from(REFUSED + PUBLIC) | st.ip_addresses(v=4).map(str)))
def test_every_inet_aton_spelling_is_read_as_the_address_the_resolver_reads(
    drawn: tuple[str, str],
) -> None:
    address, spelling = drawn
    assert resolver_reads(spelling) == address  # the oracle agrees: a spelling of `address`
    assert str(parse_ip(spelling)) == address
    assert str(parse_ip(spelling + ".")) == address  # a trailing dot changes nothing


@SEEDED
@given(spellings(st.sampled_from(REFUSED)))
def test_every_spelling_of_a_refused_address_is_refused_by_the_pure_check(
    drawn: tuple[str, str],
) -> None:
    address, spelling = drawn
    refusal = check_url_allowed(f"http://{spelling}:8000/a2a/x", ["*"])
    assert refusal is not None
    # named with the address it spells, or refused as a URL httpx cannot read at all
    assert address in refusal or "invalid URL" in refusal


@SEEDED
@given(spellings(st.sampled_from(PUBLIC)))
def test_a_spelling_of_a_public_address_passes_as_that_address(drawn: tuple[str, str]) -> None:
    address, spelling = drawn
    refusal = check_url_allowed(f"http://{spelling}/", ["*"])
    assert refusal is None or "invalid URL" in refusal  # httpx refuses a zero-padded quad
    assert AllowList.parse([address]).is_explicit(spelling)


@SEEDED
@given(st.text(alphabet="0123456789abcdefxX.", min_size=1, max_size=20))
def test_what_the_resolver_reads_as_an_address_the_guard_reads_the_same(text: str) -> None:
    read = resolver_reads(text)
    if read is not None:
        assert str(parse_ip(text)) == read
    elif not text.endswith("."):  # the guard takes one trailing dot, as a name's
        assert parse_ip(text) is None


@SEEDED
@given(
    st.sampled_from(["::1", "::ffff:127.0.0.1", "fe80::1", "fd00::1", "::ffff:10.0.0.1"]),
    st.booleans(),
)
def test_every_form_of_a_refused_ipv6_address_is_refused(address: str, upper: bool) -> None:
    exploded = ipaddress.IPv6Address(address).exploded
    for form in (address, exploded, exploded.replace(":0000", ":0")):
        form = form.upper() if upper else form
        assert resolver_reads(form) == str(ipaddress.IPv6Address(address))
        refusal = check_url_allowed(f"http://[{form}]:8000/", ["*"])
        assert refusal is not None
        assert non_public_kind(ipaddress.IPv6Address(address)) in refusal


LOOPBACK = [
    "localhost",
    "LOCALHOST.",
    "api.localhost",
    "2130706433",
    "0x7f.1",
    "0X7F.0.0.1",
    "127.1",
    "127.0.1",
    "0x7f000001",
    "017700000001",
    "0177.0.0.1",
    "127.0.0.1.",
    "[::1]",
    "[0:0:0:0:0:0:0:1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "0",
    "2852039166",  # 169.254.169.254
    "10.1",
]
FIELDS = {
    "a2a_url": lambda url: finishing(agents={"far": {"description": "d", "a2a_url": url}}),
    "http_tools[0].url": lambda url: finishing(
        http_tools=[{"name": "look", "description": "Look.", "url": url}]
    ),
    "webhook": lambda url: finishing(webhook=url),
}


async def test_post_refuses_every_spelling_of_a_refused_address_in_each_url_field() -> None:
    async with api_client(app_settings(http_tool_allow_hosts=["*"])) as client:
        for host in LOOPBACK:
            url = f"http://{host}:8000/a2a/x"
            for field, body in FIELDS.items():
                response = await client.post("/runs", json=body(url))
                error = error_of(response, 422, "validation_error")
                expected = "agents.far.a2a_url" if field == "a2a_url" else field
                assert error["details"]["field"] == expected, (host, error)
                assert host.lower().strip("[]").removesuffix(".") in error["message"].lower(), (
                    host,
                    error,
                )


async def test_post_takes_a_public_address_in_any_spelling() -> None:
    async with api_client(app_settings(http_tool_allow_hosts=["*"])) as client:
        for host in ("8.8.8.8", "134744072", "0x08080808", "8.526344", "example.com"):
            for body in FIELDS.values():
                response = await client.post("/runs", json=body(f"http://{host}/x"))
                assert response.status_code == 202, (host, response.text)


@pytest.mark.parametrize("host", ["2130706433", "0x7f.1", "127.1", "localhost", "0"])
async def test_the_transport_refuses_the_same_spellings_at_connect_time(host: str) -> None:
    async with guarded_client(NetworkGuard(["*"])) as client:
        with pytest.raises(BlockedHostError, match=r"loopback|unspecified"):
            await client.get(f"http://{host}:9/")


async def test_an_address_listed_explicitly_is_listed_in_every_spelling() -> None:
    """One reading at both moments: `127.0.0.1` listed opens `127.1` and `2130706433` at POST,
    and the guard resolves each, at connect time, to the address it spells (no lookup)."""
    guard = NetworkGuard(["127.0.0.1"], resolver=lambda host: [])
    for host in ("127.1", "2130706433", "0x7f.0.0.1", "127.0.0.1."):
        assert check_url_allowed(f"http://{host}:8000/x", ["127.0.0.1"]) is None
        assert await guard.resolve(host) == ["127.0.0.1"]
    with pytest.raises(BlockedHostError, match="not in the HTTP allow-list"):
        await guard.resolve("127.2")


def test_a_hostname_is_not_an_address() -> None:
    for name in ("example.com", "1.2.3.4.5", "0x", "08", "1..2", "cafe.babe", "deadbeef.com"):
        assert parse_ip(name) is None, name
    assert httpx.URL("http://0x7f.1/").host == "0x7f.1"  # httpx keeps the spelling as a name
