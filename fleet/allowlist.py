"""The upstream allowlist (``WSFLEET_ALLOWED_WS_HOSTS``): what it may contain, which ``ws_url`` it admits,
and which resolved addresses the fleet may connect to.  Pure: no DNS, no sockets (``fleet.upstream``
resolves and pins; ``fleet.router`` checks START events).

Entries, comma-separated:

* ``name`` or ``name:port`` -- a DNS name (letters, digits, hyphens; no wildcard, no trailing dot);
* ``address`` or ``address:port`` -- an IPv4 address, or an IPv6 address in brackets (``[::1]:9000``);
* ``network`` -- ``10.0.0.0/8``, ``fd00::/8``: admits no URL by itself, permits resolved addresses in it.

A name or address entry without a port admits only the scheme's default port (80 for ``ws://``, 443 for
``wss://``).  A name must resolve to public addresses only: a loopback, private, link-local, shared,
reserved or multicast address is refused unless it is itself an address entry or lies in a network entry,
so a name cannot point the fleet at the metadata service or a neighbour.  An IPv6 address that carries an
IPv4 address (IPv4-mapped, -compatible and -translated, NAT64, 6to4, Teredo) is public only when every
IPv4 address it carries is; the NAT64 local-use prefix ``64:ff9b:1::/48`` is never public (RFC 8215).
A malformed entry is a ``ConfigError`` naming it.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from fleet.errors import ConfigError

ALLOWLIST_VAR = "WSFLEET_ALLOWED_WS_HOSTS"
MAX_WS_URL_CHARS = 2048
DEFAULT_PORTS = {"ws": 80, "wss": 443}
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_PORT = re.compile(r"[0-9]{1,5}")
_BRACKETED = re.compile(r"\[([^\]]*)\](?::(.*))?")
# Printable ASCII without spaces: no control characters for urlsplit to strip silently.
_PRINTABLE_ASCII = re.compile(r"[\x21-\x7e]+")


def show(value: object) -> str:
    """A short repr of outside input for error messages."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def name_problem(name: str) -> str | None:
    """Why ``name`` (lower case) is not a DNS host name, or None when it is one."""
    if name.endswith("."):
        return "has a trailing dot"
    if "*" in name:
        return "is a wildcard (not supported: list each host)"
    if len(name) > 253:
        return "is longer than 253 characters"
    labels = name.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        return "is not a host name (labels of letters, digits and inner hyphens)"
    if labels[-1].isdigit():
        return "looks like an incomplete IP address"
    return None


def ip_literal(host: str) -> IPAddress | None:
    """``host`` as an address when it is an IP literal (IPv6 without brackets), else None."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _unmapped(address: IPAddress) -> IPAddress:
    """An IPv4-mapped IPv6 address (``::ffff:a.b.c.d``) as the IPv4 address it carries."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


# IPv6 prefixes whose low 32 bits are an IPv4 address: IPv4-compatible (deprecated), IPv4-translated
# (SIIT) and the NAT64 well-known prefix (RFC 6052).  IPv4-mapped, 6to4 and Teredo are decoded by ipaddress.
_LOW_32_CARRIERS = tuple(ipaddress.IPv6Network(n) for n in ("::/96", "::ffff:0:0:0/96", "64:ff9b::/96"))
# Translates to IPv4 by the operator's own rules (any RFC 6052 prefix length); not globally reachable.
_NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")


def carried_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries as a tunnel or translator's destination (a Teredo
    address carries its server's and its client's); none for a plain IPv6 one.  An IPv4-mapped address
    is not one of these: it is the IPv4 address itself (``_unmapped``)."""
    if address.sixtofour is not None:
        return (address.sixtofour,)
    if address.teredo is not None:
        return address.teredo
    if any(address in carrier for carrier in _LOW_32_CARRIERS):
        return (ipaddress.IPv4Address(int(address) & 0xFFFFFFFF),)
    return ()


def _routable(address: IPAddress) -> bool:
    return address.is_global and not address.is_multicast


def is_public(address: IPAddress) -> bool:
    """A globally routable unicast address (not loopback, private, link-local, shared, reserved...),
    carrying no IPv4 address that is not one."""
    plain = _unmapped(address)
    if isinstance(plain, ipaddress.IPv4Address):
        return _routable(plain)
    if plain in _NAT64_LOCAL_USE:
        return False
    return _routable(plain) and all(_routable(carried) for carried in carried_ipv4(plain))


@dataclass(frozen=True)
class AllowedHost:
    """A name or address entry: ``host`` is a lower-case name or a canonical address; ``port`` None means
    the scheme's default port."""

    host: str
    port: int | None

    def admits(self, host: str, port: int, default_port: int) -> bool:
        return self.host == host and port == (self.port if self.port is not None else default_port)


def _parse_port(entry: str, text: str) -> int:
    if not _PORT.fullmatch(text) or not 1 <= int(text) <= 65535:
        raise ConfigError(f"{ALLOWLIST_VAR}: bad port {text!r} in {entry!r} (1 to 65535)")
    return int(text)


def _parse_network(entry: str) -> IPNetwork:
    try:
        return ipaddress.ip_network(entry, strict=True)
    except ValueError as exc:
        raise ConfigError(f"{ALLOWLIST_VAR}: {entry!r} is not a network ({exc})") from None


def _parse_host_entry(entry: str) -> AllowedHost:
    bracketed = _BRACKETED.fullmatch(entry)
    if bracketed:
        address = ip_literal(bracketed.group(1))
        if not isinstance(address, ipaddress.IPv6Address):
            raise ConfigError(f"{ALLOWLIST_VAR}: {entry!r}: only an IPv6 address goes in brackets")
        port = bracketed.group(2)
        return AllowedHost(str(address), None if port is None else _parse_port(entry, port))
    if entry.count(":") > 1:
        raise ConfigError(f"{ALLOWLIST_VAR}: {entry!r}: write an IPv6 address in brackets, e.g. [::1]:9000")
    host, _, port = entry.partition(":")
    parsed_port = _parse_port(entry, port) if ":" in entry else None
    address = ip_literal(host)
    if address is not None:
        return AllowedHost(str(address), parsed_port)
    problem = name_problem(host.lower())
    if problem:
        raise ConfigError(f"{ALLOWLIST_VAR}: {entry!r}: {host!r} {problem}")
    return AllowedHost(host.lower(), parsed_port)


@dataclass(frozen=True)
class Allowlist:
    """Parsed entries: ``hosts`` admit URLs; ``networks`` (address entries too) permit resolved addresses."""

    hosts: tuple[AllowedHost, ...]
    networks: tuple[IPNetwork, ...]

    @classmethod
    def parse(cls, entries: tuple[str, ...]) -> Allowlist:
        """Parse every entry; the first malformed one is a ConfigError naming it."""
        hosts: list[AllowedHost] = []
        networks: list[IPNetwork] = []
        for entry in entries:
            if not _PRINTABLE_ASCII.fullmatch(entry):
                raise ConfigError(f"{ALLOWLIST_VAR}: {entry!r} has spaces or non-ASCII characters")
            if "/" in entry:
                networks.append(_parse_network(entry))
                continue
            host = _parse_host_entry(entry)
            hosts.append(host)
            address = ip_literal(host.host)
            if address is not None:
                networks.append(ipaddress.ip_network(address))
        return cls(tuple(hosts), tuple(networks))

    def admits(self, host: str, port: int, default_port: int) -> bool:
        return any(entry.admits(host, port, default_port) for entry in self.hosts)

    def permits_address(self, address: IPAddress) -> bool:
        """May the fleet connect to ``address``: public, or listed (as an address or in a network)."""
        candidates = {address, _unmapped(address)}
        listed = any(a.version == n.version and a in n for a in candidates for n in self.networks)
        return listed or is_public(address)

    def target(self, ws_url: str) -> tuple[str, int] | str:
        """(host, port) the fleet may connect to for ``ws_url``, or why it is refused (the name's addresses
        are checked when it is resolved, by ``fleet.upstream``)."""
        target = _url_target(ws_url)
        if isinstance(target, str):
            return target
        host, port, default_port = target
        if not self.hosts:
            return f"ws_url host {show(host)} is not allowed: the allowlist ({ALLOWLIST_VAR}) is empty"
        if not self.admits(host, port, default_port):
            return f"ws_url host {show(host)} port {port} is not in the allowlist ({ALLOWLIST_VAR})"
        return host, port

    def refusal(self, ws_url: str) -> str | None:
        """Why ``ws_url`` is refused, or None when it is admitted."""
        target = self.target(ws_url)
        return target if isinstance(target, str) else None


def _url_target(ws_url: str) -> tuple[str, int, int] | str:
    """(host, port, the scheme's default port) of a well-formed ``ws_url``, host canonical (lower-case
    name or address); else why it is malformed."""
    if len(ws_url) > MAX_WS_URL_CHARS:
        return f"ws_url is longer than {MAX_WS_URL_CHARS} characters"
    if not _PRINTABLE_ASCII.fullmatch(ws_url):
        return "ws_url must be printable ASCII without spaces"
    if not ws_url.startswith(("ws://", "wss://")):
        return f"ws_url must start with ws:// or wss://, not {show(ws_url)}"
    try:
        parts = urlsplit(ws_url)
    except ValueError as exc:
        return f"ws_url is malformed ({exc}): {show(ws_url)}"
    try:
        port = parts.port
    except ValueError:
        return f"ws_url has an invalid port: {show(ws_url)}"
    if "@" in parts.netloc:
        return "ws_url must not carry user information"
    if "#" in ws_url:
        return "ws_url must not have a fragment"
    host = parts.hostname
    if not host:
        return f"ws_url has no host: {show(ws_url)}"
    default_port = DEFAULT_PORTS[parts.scheme]
    if port == 0:
        return f"ws_url has an invalid port: {show(ws_url)}"
    address = ip_literal(host)
    if "[" in parts.netloc and not isinstance(address, ipaddress.IPv6Address):
        return f"ws_url has brackets around something that is not an IPv6 address: {show(ws_url)}"
    if address is None:
        problem = name_problem(host)
        if problem:
            return f"ws_url host {show(host)} {problem}"
    return (host if address is None else str(address)), (port or default_port), default_port
