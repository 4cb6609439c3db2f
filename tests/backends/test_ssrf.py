"""SSRF protection: blocked address classes, DNS, redirects and IPv6 forms, nothing sent."""

from __future__ import annotations

import ipaddress

import pytest

from tests.backends.calls import call, text_of
from tools_app.backends.http import netguard
from tools_app.backends.http.netguard import block_reason, parse_policy


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "a loopback address"),
        ("127.255.0.9", "a loopback address"),
        ("::1", "a loopback address"),
        ("10.0.0.1", "a private address"),
        ("172.16.5.4", "a private address"),
        ("192.168.1.1", "a private address"),
        ("fd12:3456::1", "a private address"),
        ("169.254.10.10", "a link-local address"),
        ("fe80::1", "a link-local address"),
        ("169.254.169.254", "a cloud metadata address"),
        ("169.254.170.2", "a cloud metadata address"),
        ("fd00:ec2::254", "a cloud metadata address"),
        ("100.100.100.200", "a cloud metadata address"),
        ("192.0.0.192", "a cloud metadata address"),
        ("224.0.0.1", "a multicast address"),
        ("239.255.255.250", "a multicast address"),
        ("ff02::1", "a multicast address"),
        ("0.0.0.0", "the unspecified address"),
        ("::", "the unspecified address"),
        ("100.64.0.1", "not a public address"),  # carrier-grade NAT
        ("198.18.0.1", "a private address"),  # benchmarking
        ("240.0.0.1", "a private address"),  # reserved
        ("255.255.255.255", "a private address"),
        ("2001:db8::1", "a private address"),  # documentation
        # IPv6 forms that embed an IPv4 address are judged by that address.
        ("::ffff:127.0.0.1", "it embeds 127.0.0.1, a loopback address"),
        ("::ffff:10.1.2.3", "it embeds 10.1.2.3, a private address"),
        ("::ffff:169.254.169.254", "it embeds 169.254.169.254, a cloud metadata address"),
        ("::127.0.0.1", "it embeds 127.0.0.1, a loopback address"),  # IPv4-compatible
        ("64:ff9b::a9fe:a9fe", "it embeds 169.254.169.254, a cloud metadata address"),  # NAT64
        ("2002:7f00:1::", "it embeds 127.0.0.1, a loopback address"),  # 6to4
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "it embeds 127.0.0.1, a loopback address"),  # Teredo
    ],
)
def test_blocked_address_classes(address, reason):
    assert block_reason(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "2002:808:808::"])
def test_public_addresses_pass(address):
    assert block_reason(ipaddress.ip_address(address)) is None


def test_allow_list_entries():
    policy = parse_policy(("internal.example", "127.0.0.1:8080", "[::1]:9000", "10.20.0.0/16", "fd00::/8"))
    assert policy.allows_host("INTERNAL.example.", 443)
    assert policy.allows_host("127.0.0.1", 8080)
    assert not policy.allows_host("127.0.0.1", 8081)
    assert policy.allows_host("::1", 9000)
    assert policy.allows_address(ipaddress.ip_address("10.20.3.4"))
    assert not policy.allows_address(ipaddress.ip_address("10.21.3.4"))
    assert policy.allows_address(ipaddress.ip_address("fd00::5"))
    with pytest.raises(ValueError, match="cannot understand 'host:port:what'"):
        parse_policy(("host:port:what",))


@pytest.fixture
def blocked_tool(http_tool):
    count = iter(range(1000))

    def make(url: str, **config):
        return http_tool(f"probe{next(count)}", {"url": url, **config})

    return make


@pytest.mark.parametrize(
    ("host", "shown"),
    [
        ("127.0.0.1", "destination 127.0.0.1 is a loopback address"),
        ("[::ffff:127.0.0.1]", "destination ::ffff:127.0.0.1 is it embeds 127.0.0.1, a loopback address"),
        ("[::ffff:7f00:1]", "destination ::ffff:7f00:1 is it embeds 127.0.0.1, a loopback address"),
        ("localhost", "host 'localhost' resolves to"),
        ("2130706433", "host '2130706433' resolves to 127.0.0.1, a loopback address"),  # 127.0.0.1 in decimal
        ("0.0.0.0", "destination 0.0.0.0 is the unspecified address"),
    ],
)
def test_loopback_in_every_spelling_is_refused_and_nothing_is_sent(api, allow, blocked_tool, host, shown):
    allow()  # nothing opened
    outcome = call(blocked_tool(f"http://{host}:{api.port}/whoami"))
    assert outcome.is_error
    assert text_of(outcome).startswith(f"The request was refused: {shown}")
    assert "outbound requests may not go there" in text_of(outcome)
    assert api.requests == []


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://10.0.0.8/", "destination 10.0.0.8 is a private address"),
        ("http://169.254.169.254/latest/meta-data/", "destination 169.254.169.254 is a cloud metadata address"),
        ("http://[fe80::1]/", "destination fe80::1 is a link-local address"),
        ("http://224.0.0.251/", "destination 224.0.0.251 is a multicast address"),
        ("http://[fd00:ec2::254]/", "destination fd00:ec2::254 is a cloud metadata address"),
        ("http://[::ffff:a9fe:a9fe]/", "destination ::ffff:a9fe:a9fe is it embeds 169.254.169.254"),
    ],
)
def test_private_literals_are_refused_before_any_connection(allow, blocked_tool, url, shown, monkeypatch):
    allow()
    connects = []

    async def spy(self, host, port, **kwargs):  # would be the socket connect
        connects.append(host)
        raise AssertionError("must not connect")

    monkeypatch.setattr(netguard.httpcore.AnyIOBackend, "connect_tcp", spy)
    outcome = call(blocked_tool(url))
    assert outcome.is_error
    assert text_of(outcome).startswith(f"The request was refused: {shown}")
    assert connects == []


def test_a_hostname_resolving_to_a_private_address_is_refused(api, allow, blocked_tool):
    allow()
    asked = []

    async def fake_dns(host, port):
        asked.append(host)
        return {"intranet.example.com": ["10.1.2.3"], "mixed.example.com": ["93.184.215.14", "192.168.0.7"]}[host]

    netguard.resolver = fake_dns
    outcome = call(blocked_tool("https://intranet.example.com/admin"))
    assert text_of(outcome) == (
        "The request was refused: host 'intranet.example.com' resolves to 10.1.2.3, a private address; "
        "outbound requests may not go there."
    )
    # One public and one private address: refused, not half-trusted.
    outcome = call(blocked_tool("https://mixed.example.com/"))
    assert "resolves to 192.168.0.7, a private address" in text_of(outcome)
    assert asked == ["intranet.example.com", "mixed.example.com"]


def test_a_rebinding_name_connects_to_the_address_that_was_checked(api, allow, blocked_tool, monkeypatch):
    """The name is resolved once, where the connection is made, and the socket connects to
    the checked address: a DNS answer that changes after the check cannot slip through."""
    allow()
    answers = iter([["93.184.215.14"], ["127.0.0.1"]])

    async def rebinding_dns(host, port):
        return next(answers)

    connects = []

    async def spy(self, host, port, **kwargs):
        connects.append((host, port))
        raise netguard.httpcore.ConnectError("no network in this test")

    netguard.resolver = rebinding_dns
    monkeypatch.setattr(netguard.httpcore.AnyIOBackend, "connect_tcp", spy)
    outcome = call(blocked_tool(f"http://rebind.example.com:{api.port}/whoami"))
    assert outcome.is_error
    assert "could not reach rebind.example.com" in text_of(outcome)
    assert connects == [("93.184.215.14", api.port)]
    assert api.requests == []


def test_an_allowed_address_also_opens_names_resolving_to_it(api, allow, blocked_tool):
    allow(api.host_port)

    async def dns(host, port):
        return ["127.0.0.1"]

    netguard.resolver = dns
    outcome = call(blocked_tool(f"http://api.internal.example:{api.port}/whoami"))
    assert outcome.is_error is False, outcome.result
    assert api.requests[0].headers["host"] == f"api.internal.example:{api.port}"


def test_a_redirect_to_a_blocked_address_is_refused(api, other_api, allow, blocked_tool):
    allow(api.host_port)  # the first hop is allowed, the second server is not
    outcome = call(blocked_tool(f"{api.origin}/redirect?to={other_api.origin}/whoami"))
    assert outcome.is_error
    assert text_of(outcome).startswith("The request was refused: destination 127.0.0.1 is a loopback address")
    assert [r.path for r in api.requests] == ["/redirect"]
    assert other_api.requests == []


@pytest.mark.parametrize(
    "target",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://[::ffff:169.254.169.254]/",
        "http://localhost:{other}/whoami",
    ],
)
def test_redirects_to_metadata_and_mapped_forms_are_refused(api, other_api, allow, blocked_tool, target):
    allow(api.host_port)
    target = target.format(other=other_api.port)
    outcome = call(blocked_tool(f"{api.origin}/redirect?status=307&to={target}"))
    assert outcome.is_error
    assert "The request was refused" in text_of(outcome)
    assert other_api.requests == []


def test_the_allow_list_opens_exactly_what_it_names(api, other_api, allow, blocked_tool, http_tool):
    allow(api.host_port)
    assert call(blocked_tool(f"{api.origin}/whoami")).is_error is False
    assert call(http_tool("other", {"url": f"{other_api.origin}/whoami"})).is_error
    assert other_api.requests == []
    allow("127.0.0.0/8")
    assert call(http_tool("other2", {"url": f"{other_api.origin}/whoami"})).is_error is False
    assert len(other_api.requests) == 1
