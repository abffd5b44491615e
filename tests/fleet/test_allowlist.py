"""Tests of fleet.allowlist: entry syntax, port-aware admission, and which addresses are permitted."""

from __future__ import annotations

import ipaddress

import pytest

from fleet.allowlist import ALLOWLIST_VAR, Allowlist
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
