"""Outbound HTTP for backends, guarded against server-side request forgery.

Admins (tenant admins included) choose the URLs HTTP tools and upstream MCP servers
reach, so by default those URLs must not lead into the platform's own network: the
guard refuses loopback, private, link-local (cloud metadata), multicast, reserved and
otherwise non-global addresses, IPv6 forms that embed IPv4 (IPv4-mapped, -compatible,
6to4, NAT64, Teredo) included.

The check sits where connections are opened (an httpcore network backend): the host is
resolved there, every address is checked, and the socket connects to the address that
was checked, so DNS rebinding between check and connect is impossible and every redirect
hop, being a new connection, is checked again. A refused destination raises
``DestinationBlocked`` before a single byte is sent.

``settings.TOOLBAY_OUTBOUND_ALLOWED_HOSTS`` opens chosen destinations: a host name or IP
(``internal.example``, ``10.1.2.3``), a host with a port (``127.0.0.1:8080``) or a
network (``10.20.0.0/16``). An IP entry also opens names that resolve to that address.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import ssl
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx
from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Cloud metadata services; most sit in link-local space anyway, these are named because
# a message saying "metadata" tells the admin what was at stake.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
    )
)
NAT64_PREFIX = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


class DestinationBlocked(Exception):
    """An outbound connection was refused; the message says which address and why."""


@dataclass(frozen=True)
class OutboundPolicy:
    hosts: frozenset[str]  # lower-case names or IP literals, any port
    host_ports: frozenset[tuple[str, int]]
    networks: tuple[IPNetwork, ...]

    def allows_host(self, host: str, port: int) -> bool:
        host = host.lower().strip("[]").rstrip(".")
        return host in self.hosts or (host, port) in self.host_ports

    def allows_address(self, address: IPAddress) -> bool:
        return any(address in network for network in self.networks if network.version == address.version)


def _split_host_port(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # [v6] or [v6]:port
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, int(port)
    if ":" in entry:
        ipaddress.IPv6Address(entry)  # a bare IPv6 literal, or ValueError
    return entry, None


@functools.lru_cache(maxsize=8)
def parse_policy(entries: tuple[str, ...]) -> OutboundPolicy:
    """Raises ValueError naming the entry that cannot be understood."""
    hosts: set[str] = set()
    host_ports: set[tuple[str, int]] = set()
    networks: list[IPNetwork] = []
    for raw in entries:
        entry = raw.strip().lower()
        if not entry:
            continue
        try:
            if "/" in entry:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            host, port = _split_host_port(entry)
        except ValueError:
            raise ValueError(f"TOOLBAY_OUTBOUND_ALLOWED_HOSTS: cannot understand {raw!r}") from None
        if port is None:
            hosts.add(host.rstrip("."))
        else:
            host_ports.add((host.rstrip("."), port))
    return OutboundPolicy(frozenset(hosts), frozenset(host_ports), tuple(networks))


def current_policy() -> OutboundPolicy:
    return parse_policy(tuple(settings.TOOLBAY_OUTBOUND_ALLOWED_HOSTS))


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in NAT64_PREFIX or (address in IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def block_reason(address: IPAddress) -> str | None:
    """Why connecting to ``address`` is refused by default, or None when it is public."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            inner = block_reason(embedded)
            return f"it embeds {embedded}, {inner}" if inner else None
        if address.scope_id:
            return "a scoped (link-local) IPv6 address"
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_private:
        return "a private address"
    if address.is_reserved:
        return "a reserved address"
    if not address.is_global:
        return "not a public address"
    return None


Resolver = Callable[[str, int], Awaitable[list[str]]]


async def system_resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[str] = []
    for _family, _type, _proto, _canonname, sockaddr in infos:
        if sockaddr[0] not in addresses:
            addresses.append(str(sockaddr[0]))
    return addresses


# Tests swap this for a fixed table to make a name resolve to a chosen address.
resolver: Resolver = system_resolve


async def vetted_addresses(host: str, port: int, policy: OutboundPolicy | None = None) -> list[str]:
    """The addresses to connect to for ``host``; raises DestinationBlocked.

    Every address the name resolves to must pass: a name with one public and one private
    address is refused rather than half-trusted.
    """
    policy = policy or current_policy()
    bare = host.strip("[]")
    try:
        addresses = await resolver(bare, port)
    except OSError as exc:
        # Not a policy decision: a network failure like any other (httpx.ConnectError).
        raise httpcore.ConnectError(f"cannot resolve host {bare!r}: {exc.strerror or exc}") from None
    if not addresses:
        raise httpcore.ConnectError(f"host {bare!r} has no address")
    if policy.allows_host(bare, port):
        return addresses
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        if policy.allows_address(address) or policy.allows_host(str(address), port):
            continue
        reason = block_reason(address)
        if reason is None:
            continue
        if _is_ip_literal(bare):
            raise DestinationBlocked(f"destination {bare} is {reason}; outbound requests may not go there")
        raise DestinationBlocked(f"host {bare!r} resolves to {text}, {reason}; outbound requests may not go there")
    return addresses


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """Resolves, vets and connects to the vetted address (TLS still verifies the name)."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await vetted_addresses(host, port)
        last_error: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last_error = exc
        assert last_error is not None
        raise last_error

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        raise DestinationBlocked("unix sockets are not an outbound destination")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@functools.lru_cache(maxsize=1)
def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle takes tens of milliseconds; every pool shares one context.
    return httpx.create_ssl_context(trust_env=True)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a connection pool whose every connection is vetted."""

    def __init__(self, *, limits: httpx.Limits) -> None:
        super().__init__(verify=_ssl_context(), trust_env=False, limits=limits)
        # httpx builds its pool without a way to pass a network backend; replace it with an
        # identical pool that has one (pinned httpx; tests/backends cover this seam).
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedNetworkBackend(),
        )


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def outbound_client() -> httpx.AsyncClient:
    """The process's pooled client for backend traffic (one per event loop).

    No environment proxies (they would bypass the guard), no automatic redirects (callers
    follow them one by one with a cap), no default timeout (callers always pass one).
    """
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        limits = httpx.Limits(
            max_connections=settings.TOOLBAY_HTTP_MAX_CONNECTIONS,
            max_keepalive_connections=min(20, settings.TOOLBAY_HTTP_MAX_CONNECTIONS),
            keepalive_expiry=30,
        )
        client = httpx.AsyncClient(
            transport=GuardedTransport(limits=limits), trust_env=False, follow_redirects=False, timeout=None
        )
        _clients[loop] = client
    return client


async def read_at_most(response: httpx.Response, limit: int) -> bytes | None:
    """The decoded body of a streamed response, or None once it passes ``limit`` bytes (the
    rest is not read): a peer cannot make a process buffer more than it allows."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
