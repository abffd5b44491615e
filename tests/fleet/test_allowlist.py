"""Tests of fleet.allowlist: entry syntax, port-aware admission, and which addresses are permitted."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.allowlist import ALLOWLIST_VAR, Allowlist, is_public
from fleet.config import ENV_VARS, FleetConfig
from fleet.errors import ConfigError


def test_the_variable_name_is_the_configs() -> None:
    assert ENV_VARS["allowed_ws_hosts"] == ALLOWLIST_VAR


@pytest.mark.parametrize(("entry", "fragment"), [
    ("*.example.com", "is a wildcard"),
    ("a b", "has spaces"),
    ("stream.example.com.", "has a trailing dot"),
    ("under_score.example.com", "is not a host name"),
    ("-lead.example.com", "is not a host name"),
    ("1.2.3", "looks like an incomplete IP address"),
    ("host:abc", "bad port 'abc'"),
    ("host:0", "bad port '0'"),
    ("host:65536", "bad port '65536'"),
    ("host:", "bad port ''"),
    ("host:1:2", "write an IPv6 address in brackets"),
    ("::1", "write an IPv6 address in brackets"),
    ("[::1", "write an IPv6 address in brackets"),
    ("[127.0.0.1]", "only an IPv6 address goes in brackets"),
    ("[::1]:x", "bad port 'x'"),
    ("user@host", "is not a host name"),
    ("host/path", "is not a network"),
    ("10.0.0.1/8", "is not a network"),
    ("", "has spaces or non-ASCII"),
    ("strëam.example.com", "has spaces or non-ASCII"),
])
def test_malformed_entries_are_refused_naming_the_entry(entry: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as refused:
        Allowlist.parse(("stream.example.com", entry))
    assert str(refused.value).startswith(f"{ALLOWLIST_VAR}: ")
    assert repr(entry) in str(refused.value)
    assert fragment in str(refused.value)


def test_a_malformed_entry_fails_the_config_at_start_up() -> None:
    with pytest.raises(ConfigError, match="is a wildcard"):
        FleetConfig.from_env({ALLOWLIST_VAR: "stream.example.com,*.example.com"})


@pytest.mark.parametrize(("url", "admitted"), [
    ("ws://stream.example.com/s", True),
    ("wss://stream.example.com/s", True),
    ("ws://STREAM.example.com:80/s", True),
    ("ws://stream.example.com:22/s", False),
    ("ws://stream.example.com:443/s", False),  # a bare entry admits the *scheme's* default port
    ("wss://backup.example.com:8443/s", True),
    ("wss://backup.example.com/s", False),
    ("ws://10.0.0.5:9000/s", True),
    ("ws://10.0.0.6:9000/s", False),  # a network entry admits no URL by itself
    ("ws://[fd00:0::7]/s", True),
    ("ws://[fd00::7]:81/s", False),
    ("ws://stream.example.com./s", False),
    ("ws://[stream.example.com]/s", False),
])
def test_admission_is_port_aware(url: str, admitted: bool) -> None:
    allowlist = Allowlist.parse(
        ("stream.example.com", "backup.example.com:8443", "10.0.0.5:9000", "10.0.0.0/8", "[fd00::7]")
    )
    assert (allowlist.refusal(url) is None) is admitted


@pytest.mark.parametrize(("address", "permitted"), [
    ("93.184.216.34", True),
    ("2606:2800:220:1::1", True),
    ("127.0.0.1", False),
    ("169.254.169.254", False),
    ("169.254.170.2", False),
    ("10.1.2.3", True),  # in 10.0.0.0/8
    ("172.16.0.1", False),
    ("192.168.1.1", False),
    ("100.64.0.1", False),  # shared address space
    ("0.0.0.0", False),
    ("224.0.0.1", False),
    ("::1", False),
    ("fe80::1", False),
    ("fd00::7", True),  # an address entry
    ("fd00::8", False),
    ("::ffff:127.0.0.1", False),
    ("::ffff:10.1.2.3", True),  # IPv4-mapped, in 10.0.0.0/8
])
def test_addresses_must_be_public_or_listed(address: str, permitted: bool) -> None:
    allowlist = Allowlist.parse(("stream.example.com", "10.0.0.0/8", "[fd00::7]"))
    assert allowlist.permits_address(ipaddress.ip_address(address)) is permitted


def _embeddings(v4: ipaddress.IPv4Address) -> dict[str, ipaddress.IPv6Address]:
    """Every IPv6 form that carries ``v4`` (a Teredo address as its server and, obfuscated, its client)."""
    low = int(v4)
    public = int(ipaddress.IPv4Address("93.184.216.34"))
    return {
        "mapped": ipaddress.IPv6Address(f"::ffff:{v4}"),
        "compatible": ipaddress.IPv6Address(low),
        "translated": ipaddress.IPv6Address((0xFFFF << 48) | low),
        "nat64": ipaddress.IPv6Address(f"64:ff9b::{v4}"),
        "6to4": ipaddress.IPv6Address((0x2002 << 112) | (low << 80) | 1),
        "teredo-server": ipaddress.IPv6Address((0x20010000 << 96) | (low << 64) | (public ^ 0xFFFFFFFF)),
        "teredo-client": ipaddress.IPv6Address((0x20010000 << 96) | (public << 64) | (low ^ 0xFFFFFFFF)),
    }


REFUSED_V4 = ["127.0.0.1", "10.0.0.5", "169.254.169.254", "192.168.1.1", "100.64.0.1", "0.0.0.0", "224.0.0.1"]


@pytest.mark.parametrize("v4", REFUSED_V4)
@pytest.mark.parametrize("form", list(_embeddings(ipaddress.IPv4Address("10.0.0.1"))))
def test_an_ipv6_form_carrying_a_refused_ipv4_address_is_refused(form: str, v4: str) -> None:
    address = _embeddings(ipaddress.IPv4Address(v4))[form]
    assert not is_public(address)
    assert not Allowlist.parse(("stream.example.com",)).permits_address(address)


@pytest.mark.parametrize("address", [
    "64:ff9b::a9fe:a9fe",  # NAT64 of the metadata service, 169.254.169.254
    "64:ff9b::10.0.0.1",
    "::10.0.0.1",  # IPv4-compatible
    "::ffff:0:192.168.0.1",  # IPv4-translated
    "2002:a00:1::1",  # 6to4 of 10.0.0.1
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "64:ff9b:1::5db8:d822",  # NAT64 local-use prefix: never public, whatever it carries
    "64:ff9b:1:5db8:d8:2200::",
])
def test_ipv4_hidden_in_ipv6_cannot_reach_a_private_network(address: str) -> None:
    assert not Allowlist.parse(("stream.example.com",)).permits_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["64:ff9b::93.184.216.34", "::ffff:93.184.216.34"])
def test_a_public_ipv4_address_reached_through_nat64_or_mapped_is_public(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))


@given(st.ip_addresses(v=4).filter(lambda a: not is_public(a)), st.sampled_from(list(_embeddings(
    ipaddress.IPv4Address("10.0.0.1")))))
def test_no_embedding_makes_a_refused_ipv4_address_public(v4: ipaddress.IPv4Address, form: str) -> None:
    assert not is_public(_embeddings(v4)[form])


def test_a_listed_network_permits_the_mapped_form_only() -> None:
    """An IPv4-mapped address is the IPv4 address itself; a translated or tunnelled one is someone else's
    route to it, so listing 10.0.0.0/8 does not open NAT64 or 6to4 to it."""
    allowlist = Allowlist.parse(("stream.example.com", "10.0.0.0/8"))
    forms = _embeddings(ipaddress.IPv4Address("10.1.2.3"))
    assert {name for name, address in forms.items() if allowlist.permits_address(address)} == {"mapped"}
