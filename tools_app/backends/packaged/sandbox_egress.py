"""The only way out of a sandbox: an HTTP proxy on a Unix socket that opens listed hosts only.

One proxy per sandboxed instance, in the process that spawned it, listening on a Unix socket
that is bind-mounted into that sandbox alone (``sandbox_shim`` bridges it to a loopback port
inside the sandbox's network namespace). It speaks the two forms HTTP clients use through
``HTTP_PROXY``/``HTTPS_PROXY``: ``CONNECT host:port`` (a tunnel; TLS stays end to end) and
an absolute-form request ``GET http://host:port/path`` (forwarded once, ``Connection:
close``).

A destination passes two checks, both before any connection is opened:

1. the instance's policy lists it: ``host`` (ports 80 and 443) or ``host:port``, compared
   exactly (a listed name does not open its IP address, nor the reverse);
2. the SSRF guard (``tools_app.backends.http.netguard``) vets what the name resolves to:
   loopback, private, link-local and metadata addresses are refused unless the operator
   opened them in ``TOOLBAY_OUTBOUND_ALLOWED_HOSTS``. The proxy connects to the address that
   was vetted (no second resolution, no DNS rebinding).

A refusal answers ``403`` with the reason in the body and an ``X-Toolbay-Refused`` header,
and is logged; ``refusals`` keeps the last ones for the operator (and the tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections import deque
from dataclasses import dataclass, field

import httpcore

from tools_app.backends.http import netguard

log = logging.getLogger(__name__)

HEAD_LIMIT_BYTES = 16 * 1024
HEAD_TIMEOUT_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 10.0
MAX_CONNECTIONS = 32  # per instance, at once
DEFAULT_PORTS = (80, 443)
PHRASES = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}


@dataclass(frozen=True)
class HostPolicy:
    """The destinations an instance may reach: (host, port) pairs, hosts lower-case."""

    pairs: frozenset[tuple[str, int]]

    @classmethod
    def parse(cls, entries: tuple[str, ...]) -> HostPolicy:
        """Raises ValueError naming the entry it cannot understand."""
        pairs: set[tuple[str, int]] = set()
        for raw in entries:
            entry = raw.strip().lower().rstrip(".")
            try:
                host, port = _split(entry)
            except ValueError:
                raise ValueError(f"allowed host {raw!r}: expected HOST or HOST:PORT") from None
            if not host or any(c in host for c in "/@?#* \t"):
                raise ValueError(f"allowed host {raw!r}: expected HOST or HOST:PORT")
            pairs.update((host, p) for p in ((port,) if port is not None else DEFAULT_PORTS))
        return cls(frozenset(pairs))

    def allows(self, host: str, port: int) -> bool:
        return (host.lower().strip("[]").rstrip("."), port) in self.pairs


def _split(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        ipaddress.IPv6Address(host)
        port = int(rest[1:]) if rest.startswith(":") else None
    elif entry.count(":") == 1:
        host, _, text = entry.partition(":")
        port = int(text)
    elif ":" in entry:
        host, port = str(ipaddress.IPv6Address(entry)), None
    else:
        host, port = entry, None
    if port is not None and not 0 < port < 65536:
        raise ValueError(entry)
    return host, port


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class EgressProxy:
    """Serves one sandbox; ``start`` binds the socket, ``close`` stops it."""

    policy: HostPolicy
    socket_path: str
    refusals: deque[str] = field(default_factory=lambda: deque(maxlen=50))
    connections: int = 0  # connections opened to destinations, for the operator
    _server: asyncio.AbstractServer | None = None
    _slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_CONNECTIONS))

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, path=self.socket_path, limit=HEAD_LIMIT_BYTES)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with self._slots:
            try:
                await self._handle(reader, writer)
            except Refused as refused:
                self.refusals.append(refused.reason)
                log.warning("sandbox egress refused: %s", refused.reason)
                body = (refused.reason + "\n").encode()
                head = (
                    f"HTTP/1.1 {refused.status} {PHRASES[refused.status]}\r\n"
                    f"X-Toolbay-Refused: {refused.reason[:200]}\r\nContent-Type: text/plain\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                )
                with contextlib.suppress(ConnectionError, OSError):
                    writer.write(head.encode("latin-1", "replace") + body)
                    await writer.drain()
            except (TimeoutError, ConnectionError, OSError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_SECONDS)
        except asyncio.LimitOverrunError:
            raise Refused(400, "request head too large") from None
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ")
        except ValueError:
            raise Refused(400, "malformed request line") from None
        if method == "CONNECT":
            host, port = _target_host_port(target, default_port=443)
            upstream_reader, upstream_writer = await self._open(host, port)
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await writer.drain()
        else:
            if not target.lower().startswith("http://"):
                raise Refused(400, f"{method} {target[:100]}: only CONNECT and http:// requests go through")
            authority, _, path = target[len("http://") :].partition("/")
            host, port = _target_host_port(authority.rpartition("@")[2], default_port=80)
            upstream_reader, upstream_writer = await self._open(host, port)
            kept = [
                line
                for line in lines[1:]
                if line and not line.lower().startswith(("proxy-", "connection:", "keep-alive:"))
            ]
            rewritten = [f"{method} /{path} {version}", *kept, "Connection: close", "", ""]
            upstream_writer.write("\r\n".join(rewritten).encode("latin-1"))
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        upstream_writer.close()

    async def _open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        where = f"{host}:{port}"
        if not self.policy.allows(host, port):
            raise Refused(403, f"{where} is not in this server's allowed hosts")
        try:
            addresses = await netguard.vetted_addresses(host, port)
        except netguard.DestinationBlocked as blocked:
            raise Refused(403, f"{where}: {blocked}") from None
        except httpcore.ConnectError as exc:
            raise Refused(502, f"{where}: {exc}") from None
        last: OSError | None = None
        for address in addresses:
            try:
                opened = await asyncio.wait_for(asyncio.open_connection(address, port), CONNECT_TIMEOUT_SECONDS)
            except (TimeoutError, OSError) as exc:
                last = exc if isinstance(exc, OSError) else OSError(f"timed out connecting to {address}")
                continue
            self.connections += 1
            return opened
        raise Refused(502, f"{where}: cannot connect ({last})")


def _target_host_port(authority: str, *, default_port: int) -> tuple[str, int]:
    try:
        host, port = _split(authority.lower())
    except ValueError:
        raise Refused(400, f"cannot understand the destination {authority[:100]!r}") from None
    return host, port if port is not None else default_port


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()
