"""The allow-list and address rules: check_url_allowed (pure) and NetworkGuard.resolve (DNS)."""

from __future__ import annotations

import ipaddress
import re

import pytest

from app.tools.base import ToolError
from app.tools.netguard import (
    AllowList,
    BlockedHostError,
    NetworkGuard,
    check_url_allowed,
    non_public_kind,
)
from tests.tools.conftest import FakeDNS


@pytest.mark.parametrize(
    ("url", "allow_hosts"),
    [
        ("https://api.example.com/v1", ["api.example.com"]),
        ("http://API.Example.COM./v1", ["api.example.com"]),
        ("https://api.example.com:8443/", ["api.example.com"]),
        ("https://a.example.com/", ["*.example.com"]),
        ("https://a.b.example.com/", ["*.example.com"]),
        ("https://anything.org/", ["*"]),
        ("https://93.184.216.34/", ["*"]),
        ("http://127.0.0.1:8000/", ["127.0.0.1"]),
        ("http://[::1]:8000/", ["::1"]),
        ("http://[::1]:8000/", ["[::1]"]),
        ("http://10.0.0.1/", [" 10.0.0.1 ", ""]),
        ("http://internal.test/", ["internal.test"]),
        ("http://bücher.example/", ["xn--bcher-kva.example"]),
    ],
)
def test_check_url_allowed_accepts_listed_hosts(url: str, allow_hosts: list[str]) -> None:
    assert check_url_allowed(url, allow_hosts) is None


@pytest.mark.parametrize(
    ("url", "allow_hosts", "message"),
    [
        ("ftp://api.example.com/", ["*"], "only http and https URLs may be fetched, not ftp"),
        ("file:///etc/passwd", ["*"], "only http and https URLs"),
        ("api.example.com/v1", ["*"], "only http and https URLs"),
        ("http:///path", ["*"], "has no host"),
        ("http://evil.com/", ["api.example.com"], "host 'evil.com' is not in the HTTP allow-list"),
        ("http://api.example.com/", [], "not in the HTTP allow-list (it is empty)"),
        ("https://example.com/", ["*.example.com"], "'example.com' is not in the HTTP allow-list"),
        ("https://badexample.com/", ["*.example.com"], "not in the HTTP allow-list"),
        ("http://127.0.0.1/", ["*"], "host '127.0.0.1' is a loopback address"),
        ("http://10.0.0.1/", ["*"], "host '10.0.0.1' is a private address"),
        ("http://169.254.169.254/latest/", ["*"], "is a link-local address"),
        ("http://0.0.0.0/", ["*"], "is an unspecified address"),
        ("http://224.0.0.1/", ["*"], "is a multicast address"),
        ("http://[::1]/", ["*"], "is a loopback address"),
        ("http://[::ffff:127.0.0.1]/", ["*"], "is a loopback address"),
        ("http://[::ffff:10.0.0.1]/", ["*"], "is a private address"),
        ("http://[fe80::1]/", ["*"], "is a link-local address"),
        ("http://100.64.0.1/", ["*"], "is a non-public address"),
        ("http://10.0.0.1/", ["*.example.com", "*"], "only when the host is listed explicitly"),
        ("http://127.0.0.1/", ["localhost"], "not in the HTTP allow-list"),
        ("http://[::1]/", ["127.0.0.1"], "not in the HTTP allow-list"),
    ],
)
def test_check_url_allowed_refuses_with_a_message_naming_the_problem(
    url: str, allow_hosts: list[str], message: str
) -> None:
    refusal = check_url_allowed(url, allow_hosts)
    assert refusal is not None
    assert message in refusal


@pytest.mark.parametrize(
    "entry", ["http://x.com", "x.com:8080", "x.com/path", "a*.com", "*.", "**", "a b"]
)
def test_allow_list_refuses_malformed_entries(entry: str) -> None:
    with pytest.raises(ValueError, match="invalid HTTP allow-list entry"):
        AllowList.parse([entry])


def test_allow_list_refuses_one_string_instead_of_a_list() -> None:
    with pytest.raises(TypeError, match="not one string"):
        AllowList.parse("api.example.com,other.com")


def test_wildcard_entries_never_make_a_host_explicit() -> None:
    allow = AllowList.parse(["*", "*.test", "app.test", "::1"])
    assert allow.is_explicit("APP.test.")
    assert allow.is_explicit("[::1]")
    assert allow.is_explicit("0:0::1")
    assert not allow.is_explicit("other.test")


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("239.1.1.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "non-public"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fd00::1", "private"),
        ("fe80::1", "link-local"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
        ("2002:a00:1::", "private"),  # 6to4 around 10.0.0.1
        ("64:ff9b::a00:1", "private"),  # NAT64 around 10.0.0.1
        ("64:ff9b::808:808", None),  # NAT64 around 8.8.8.8
    ],
)
def test_non_public_kind_classifies_addresses(address: str, kind: str | None) -> None:
    assert non_public_kind(ipaddress.ip_address(address)) == kind


async def test_resolve_refuses_a_wildcard_host_resolving_to_a_private_address(
    dns: FakeDNS,
) -> None:
    guard = NetworkGuard(["*", "*.test"], resolver=dns)
    with pytest.raises(BlockedHostError) as caught:
        await guard.resolve("internal.test")
    assert str(caught.value) == (
        "host 'internal.test' resolves to 10.0.0.1, which is a private address; non-public "
        "addresses may be reached only when the host is listed explicitly in the HTTP allow-list"
    )


async def test_resolve_refuses_when_any_resolved_address_is_not_public(dns: FakeDNS) -> None:
    guard = NetworkGuard(["*"], resolver=dns)
    with pytest.raises(BlockedHostError, match=re.escape("resolves to 10.0.0.1")):
        await guard.resolve("mixed.test")


async def test_resolve_allows_a_private_address_for_an_explicitly_listed_host(
    dns: FakeDNS,
) -> None:
    guard = NetworkGuard(["internal.test"], resolver=dns)
    assert await guard.resolve("internal.test") == ["10.0.0.1"]


async def test_resolve_does_not_look_up_ip_literals(dns: FakeDNS) -> None:
    guard = NetworkGuard(["10.0.0.1"], resolver=dns)
    assert await guard.resolve("10.0.0.1") == ["10.0.0.1"]
    assert dns.lookups == []


async def test_resolve_refuses_an_unlisted_host_without_looking_it_up(dns: FakeDNS) -> None:
    guard = NetworkGuard(["api.example.com"], resolver=dns)
    with pytest.raises(BlockedHostError, match="not in the HTTP allow-list"):
        await guard.resolve("internal.test")
    assert dns.lookups == []


async def test_resolve_reports_a_host_that_does_not_resolve(dns: FakeDNS) -> None:
    guard = NetworkGuard(["*"], resolver=dns)
    with pytest.raises(ToolError, match=re.escape("could not resolve host 'nowhere.test'")):
        await guard.resolve("nowhere.test")


async def test_resolve_accepts_a_plain_function_as_resolver() -> None:
    guard = NetworkGuard(["*"], resolver=lambda host: ["93.184.216.34", "93.184.216.34"])
    assert await guard.resolve("example.com") == ["93.184.216.34"]


async def test_resolve_refuses_a_numeric_spelling_of_loopback_resolved_by_the_system() -> None:
    guard = NetworkGuard(["*"])
    with pytest.raises(BlockedHostError, match="'2130706433'"):
        await guard.resolve("2130706433")
