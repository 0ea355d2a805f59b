"""Which hosts and addresses the HTTP tools may reach.

The allow-list (`FINISHLINE_HTTP_TOOL_ALLOW_HOSTS`) holds entries of three kinds:

- an exact hostname or IP literal: `api.example.com`, `127.0.0.1`, `::1` (or `[::1]`);
- a suffix wildcard, `*.example.com`: any subdomain (`a.example.com`, `a.b.example.com`),
  not `example.com` itself;
- `*`: any host whose addresses are public.

Entries are case-insensitive; a trailing dot is ignored; ports are not part of an entry (a
listed host may be reached on any port); internationalized names are written in their
ASCII (`xn--`) form, which is what URLs are compared in.

Non-public addresses (private, loopback, link-local, multicast, reserved, unspecified,
shared/CGNAT, documentation ranges, and the IPv4-mapped, 6to4 and NAT64 IPv6 forms of
these; precisely: everything `ipaddress` does not call global) are refused unless the host
of the URL, as written (name or IP literal), is listed explicitly. A wildcard never opens
a private address. An IP literal is read as the resolver and the socket read it
(`parse_ip`: `2130706433`, `0x7f.1`, `127.1` and `0177.0.0.1` are all 127.0.0.1), and
`localhost` and the names under it are the loopback address (RFC 6761), so every spelling
of a refused address is refused by the pure check already, when a request is made.

Two checks, at two moments:
- `check_url_allowed` (pure, no DNS): scheme, host against the list, and IP literals
  against the address rules. The API layer calls it when a request declares an HTTP tool,
  and the tools call it for every URL they fetch, redirect hops included.
- `NetworkGuard.resolve` (DNS): every address the host resolves to must pass. It runs at
  connect time inside the HTTP transport (`app.tools.transport`), which then connects to
  the very addresses it checked, so a DNS answer cannot change between check and connect.
"""

from __future__ import annotations

import functools
import inspect
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import anyio
import httpx

from app.tools.base import ToolError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

Resolver = Callable[[str], Sequence[str] | Awaitable[Sequence[str]]]
"""Maps a hostname to its IP addresses (as text). May be sync (then it must not block: use
it for static maps in tests) or async. Raises `OSError` or `LookupError` for an unknown host."""

_HOSTNAME = re.compile(
    r"^[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*$"
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_ALLOWED_SCHEMES = ("http", "https")


class BlockedHostError(ToolError):
    """A URL, host or resolved address that the allow-list does not open."""


@dataclass(frozen=True, slots=True)
class AllowList:
    """A parsed allow-list; see the module docstring for the meaning of the entries."""

    exact: frozenset[str]
    suffixes: tuple[str, ...]
    any_public: bool

    @classmethod
    def parse(cls, entries: Sequence[str]) -> AllowList:
        """Parse entries; blank ones are skipped, a malformed one raises `ValueError`."""
        if isinstance(entries, str):
            raise TypeError("the HTTP allow-list is a sequence of entries, not one string")
        return _parse_cached(tuple(entries))

    def is_explicit(self, host: str) -> bool:
        """True when `host` itself (name or IP literal) is an entry, not via a wildcard."""
        return normalize_host(host) in self.exact

    def matches(self, host: str) -> bool:
        """True when an entry covers `host` (for `*`: any host; addresses are checked apart)."""
        name = normalize_host(host)
        return name in self.exact or self.any_public or name.endswith(self.suffixes)

    def __bool__(self) -> bool:
        return bool(self.exact or self.suffixes or self.any_public)


def check_url_allowed(url: str, allow_hosts: Sequence[str]) -> str | None:
    """None when `url` may be fetched under `allow_hosts`, else why not, naming the host.

    Pure: no DNS. A hostname that passes here is still resolved and checked at connect time.
    """
    return check_url(url, AllowList.parse(allow_hosts))


def check_url(url: str | httpx.URL, allow: AllowList) -> str | None:
    """`check_url_allowed` on a parsed allow-list."""
    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
    except httpx.InvalidURL as exc:
        return f"invalid URL {str(url)[:200]!r}: {exc}"
    if parsed.scheme not in _ALLOWED_SCHEMES:
        return f"only http and https URLs may be fetched, not {parsed.scheme or 'no'} scheme"
    host = parsed.raw_host.decode("ascii")
    if not host:
        return f"the URL {str(url)[:200]!r} has no host"
    return check_host(host, allow)


def check_host(host: str, allow: AllowList) -> str | None:
    """The name-level check of `check_url`: the host against the list, IP literals (in any
    spelling, `parse_ip`) and the loopback names (`localhost`) included."""
    if allow.is_explicit(host):
        return None
    if not allow.matches(host):
        listed = "it is empty" if not allow else "ask the operator to add the host"
        return f"host {host!r} is not in the HTTP allow-list ({listed})"
    if loopback_name(host):
        return f"host {host!r} names the loopback address (RFC 6761); {_EXPLICIT}"
    address = parse_ip(host)
    if address is not None:
        kind = non_public_kind(address)
        if kind is not None:
            return _private_refusal(host, address, kind, spelled=True)
    return None


def normalize_host(host: str) -> str:
    """Lower case, no trailing dot, no IPv6 brackets, IP literals in canonical form (every
    spelling of an address as that address: `0x7f.1` is `127.0.0.1`)."""
    name = _bare(host)
    address = parse_ip(name)
    return str(address) if address is not None else name


def _bare(host: str) -> str:
    name = host.strip().lower().removesuffix(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    return name


def parse_ip(text: str) -> IPAddress | None:
    """The IP address `text` spells, read as the resolver and the socket read a host, else
    None (a hostname): IPv6 (brackets optional), and IPv4 in the dotted-quad form and every
    shorthand `inet_aton` takes (`127.1`, `2130706433`, `0x7f.1`, `0177.0.0.1`: one to four
    parts, each decimal, octal after a `0` or hex after `0x`, the last filling the bytes
    left). Case and one trailing dot do not matter."""
    name = _bare(text)
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        pass
    if not name or name.strip(_SHORTHAND):
        return None  # a character no IPv4 shorthand has: a hostname
    return _inet_aton(name)


_SHORTHAND = "0123456789abcdefx."
_DIGITS = {8: frozenset("01234567"), 10: frozenset("0123456789"), 16: frozenset(_SHORTHAND[:16])}


def _inet_aton(text: str) -> ipaddress.IPv4Address | None:
    """`inet_aton`'s reading of `text` (glibc's, as `getaddrinfo` does it), else None."""
    parts = text.split(".")
    if len(parts) > 4:
        return None
    values = [_aton_part(part) for part in parts]
    *head, last = values
    if last is None or any(v is None or v > 0xFF for v in head):
        return None
    if last >= 1 << (8 * (4 - len(head))):
        return None
    number = last
    for index, value in enumerate(head):
        number |= (value or 0) << (8 * (3 - index))
    return ipaddress.IPv4Address(number)


def _aton_part(part: str) -> int | None:
    """One part of an `inet_aton` address: decimal, octal after a `0`, hex after `0x`."""
    if part.startswith("0x"):
        digits, base = part[2:], 16
    elif part.startswith("0") and len(part) > 1:
        digits, base = part[1:], 8
    else:
        digits, base = part, 10
    if not digits or not _DIGITS[base].issuperset(digits):
        return None
    significant = digits.lstrip("0") or "0"
    if len(significant) > 11:  # past 32 bits in any of the three bases
        return None
    value = int(significant, base)
    return value if value <= 0xFFFFFFFF else None


def loopback_name(host: str) -> bool:
    """`localhost` and the names under it, which name the loopback address (RFC 6761, §6.3)."""
    name = _bare(host)
    return name == "localhost" or name.endswith(".localhost")


def non_public_kind(address: IPAddress) -> str | None:
    """None for a public address, else what it is ("loopback", "private", ...)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return non_public_kind(embedded)
    for kind, flag in (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
    ):
        if flag:
            return kind
    return None if address.is_global else "non-public"


class NetworkGuard:
    """The allow-list plus a resolver: decides which addresses a connection may use."""

    def __init__(self, allow_hosts: Sequence[str], resolver: Resolver | None = None) -> None:
        self.allow = AllowList.parse(allow_hosts)
        self.allow_entries = tuple(entry.strip() for entry in allow_hosts if entry.strip())
        self._resolver: Resolver = resolver or system_resolver

    def check_url(self, url: str | httpx.URL) -> str | None:
        """The pure check of `check_url_allowed`, on this guard's list."""
        return check_url(url, self.allow)

    async def resolve(self, host: str) -> list[str]:
        """The addresses to connect to for `host`, each of them allowed.

        Raises `BlockedHostError` when the host is not listed, or when any address it
        resolves to is not public and the host is not listed explicitly; `ToolError` when it
        does not resolve.
        """
        refusal = check_host(host, self.allow)
        if refusal is not None:
            raise BlockedHostError(refusal)
        literal = parse_ip(host)
        if literal is not None:
            return [str(literal)]
        addresses = await self._lookup(host)
        if not self.allow.is_explicit(host):
            for address in addresses:
                kind = non_public_kind(address)
                if kind is not None:
                    raise BlockedHostError(_private_refusal(host, address, kind))
        return [str(address) for address in addresses]

    async def _lookup(self, host: str) -> list[IPAddress]:
        try:
            answer = self._resolver(host)
            if inspect.isawaitable(answer):
                answer = await answer
        except (OSError, LookupError) as exc:
            raise ToolError(f"could not resolve host {host!r}: {exc}") from None
        addresses = [parse_ip(text.split("%", 1)[0]) for text in dict.fromkeys(answer)]
        if not addresses or None in addresses:
            raise ToolError(f"could not resolve host {host!r} to an IP address")
        return [address for address in addresses if address is not None]


async def system_resolver(host: str) -> list[str]:
    """The addresses the operating system resolves `host` to (getaddrinfo, in a thread)."""
    infos = await anyio.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


_EXPLICIT = (
    "non-public addresses may be reached only when the host is listed explicitly in the HTTP "
    "allow-list"
)


def _private_refusal(host: str, address: IPAddress, kind: str, *, spelled: bool = False) -> str:
    """Why `host` may not be reached: it spells (an IP literal) or resolves to `address`."""
    if _bare(host) == str(address):
        via = ""
    else:
        via = f" {'spells' if spelled else 'resolves to'} {address}, which"
    return f"host {host!r}{via} is {_article(kind)} {kind} address; {_EXPLICIT}"


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


@functools.lru_cache(maxsize=32)
def _parse_cached(entries: tuple[str, ...]) -> AllowList:
    exact: set[str] = set()
    suffixes: list[str] = []
    any_public = False
    for raw in entries:
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            any_public = True
            continue
        entry = entry.removesuffix(".")
        if entry.startswith("*.") and _HOSTNAME.fullmatch(entry[2:]):
            suffixes.append(entry[1:])
        elif parse_ip(entry) is not None:
            exact.add(normalize_host(entry))
        elif _HOSTNAME.fullmatch(entry):
            exact.add(entry)
        else:
            raise ValueError(
                f"invalid HTTP allow-list entry {raw!r}: use a hostname, an IP address, "
                "'*.example.com' or '*' (no scheme, port or path)"
            )
    return AllowList(frozenset(exact), tuple(suffixes), any_public)
