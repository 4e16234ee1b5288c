"""SSH target strings: ssh://[user@]host[:port] and [user@]host[:port], IPv6 in brackets, aliases."""

from __future__ import annotations

import pytest

from kimitui.hosts.ssh_target import SshTarget, parse_target


@pytest.mark.parametrize(("text", "want"), [
    ("gpubox", SshTarget("gpubox")),
    ("ssh://gpubox", SshTarget("gpubox")),
    ("SSH://gpubox/", SshTarget("gpubox")),
    ("root@gpubox", SshTarget("gpubox", "root")),
    ("ssh://alice@10.0.0.7:2222", SshTarget("10.0.0.7", "alice", 2222)),
    ("h200-01.example.org:22", SshTarget("h200-01.example.org", None, 22)),
    ("[::1]:2222", SshTarget("::1", None, 2222)),
    ("ssh://bob@[fe80::1%eth0]:22", SshTarget("fe80::1%eth0", "bob", 22)),
    ("[::1]", SshTarget("::1")),
    ("::1", SshTarget("::1")),
    ("a@b@host", SshTarget("host", "a@b")),
])
def test_parse(text: str, want: SshTarget) -> None:
    assert parse_target(text) == want


@pytest.mark.parametrize("text", [
    "", "ssh://", "host:0", "host:65536", "host:port", "@host", "[::1", "[::1]x", "ssh://host/path",
    "host name", "-oProxyCommand=x", "host;id", "ssh://$(id)",
])
def test_rejects(text: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_target(text)
    assert "\n" not in str(err.value)


def test_round_trip() -> None:
    for text in ("alice@10.0.0.7:2222", "gpubox", "bob@[::1]:22"):
        t = parse_target(text)
        assert str(t) == text
        assert parse_target(t.url) == t
