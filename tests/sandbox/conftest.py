"""Fixtures for the sandbox tests: real packages from npm and PyPI, and an MCP client on a
sandboxed process.

Packages are installed once into ``TOOLBAY_TEST_PACKAGE_CACHE`` (default
``/var/tmp/toolbay-test-packages``; outside the project and readable by the sandbox's uid)
and reused by later runs; a lock keeps parallel sessions from installing the same one twice.
Where bubblewrap or unprivileged user namespaces are missing, the tests skip and say why.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.shared.message import SessionMessage

from tools_app.backends.packaged.sandbox import sandbox_status

CACHE = Path(os.environ.get("TOOLBAY_TEST_PACKAGE_CACHE", "/var/tmp/toolbay-test-packages"))
FILESYSTEM_SERVER = ("@modelcontextprotocol/server-filesystem", "2026.8.31")
FETCH_SERVER = ("mcp-server-fetch", "2026.10.24")
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture(autouse=True)
def require_sandbox() -> None:
    status = sandbox_status()
    if not status.available:
        pytest.skip(f"no sandbox on this machine: {status.reason}")


def _install(name: str, command: Callable[[Path], list[str]]) -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    CACHE.chmod(0o755)
    target = CACHE / name.replace("/", "+").replace("@", "", 1)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".installed").exists():
            result = subprocess.run(command(target), capture_output=True, text=True, timeout=600, check=False)
            if result.returncode != 0:
                pytest.fail(f"installing {name} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
            subprocess.run(["chmod", "-R", "a+rX", str(target)], check=True)
            (target / ".installed").touch()
    return target


@pytest.fixture
def package_cache(settings: Any) -> Path:
    """Toolbay's package cache for the test (``TOOLBAY_PACKAGE_CACHE``), kept between runs."""
    settings.TOOLBAY_PACKAGE_CACHE = str(CACHE / "toolbay-cache")
    return CACHE / "toolbay-cache"


@pytest.fixture(scope="session")
def filesystem_server() -> Path:
    """The entry point of @modelcontextprotocol/server-filesystem, installed with npm."""
    package, version = FILESYSTEM_SERVER
    root = _install(
        f"{package}@{version}",
        lambda target: ["npm", "install", "--prefix", str(target), "--no-audit", "--no-fund", f"{package}@{version}"],
    )
    return root


@pytest.fixture(scope="session")
def fetch_server() -> Path:
    """mcp-server-fetch and its dependencies (the mcp SDK among them), installed with pip --target."""
    package, version = FETCH_SERVER
    return _install(
        f"{package}=={version}",
        lambda target: [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--target",
            str(target),
            f"{package}=={version}",
        ],
    )


@pytest.fixture
def empty_package() -> Iterator[Path]:
    """The package of a probe that needs only the system (its own python3)."""
    path = Path(tempfile.mkdtemp(prefix="toolbay-empty-package-"))
    path.chmod(0o755)
    yield path
    path.rmdir()


@dataclass
class StdioSession:
    session: ClientSession
    process: asyncio.subprocess.Process
    stderr: list[bytes] = field(default_factory=list)


@contextlib.asynccontextmanager
async def _stdio_session(process: asyncio.subprocess.Process) -> AsyncIterator[StdioSession]:
    """The official SDK's ClientSession over a process's stdin/stdout (newline-delimited JSON-RPC)."""
    assert process.stdin and process.stdout and process.stderr
    stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    errors: list[bytes] = []

    async def read() -> None:
        async with read_writer:
            while line := await stdout.readline():
                try:
                    message: SessionMessage | Exception = SessionMessage(
                        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    )
                except ValueError as exc:
                    message = exc
                await read_writer.send(message)

    async def write() -> None:
        async with write_reader:
            async for message in write_reader:
                stdin.write((message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode())
                await stdin.drain()

    async def drain_stderr() -> None:
        while chunk := await stderr.read(65536):
            errors.append(chunk)

    async with anyio.create_task_group() as group:
        group.start_soon(read)
        group.start_soon(write)
        group.start_soon(drain_stderr)
        try:
            async with ClientSession(read_stream, write_stream) as session:
                await session.initialize()
                yield StdioSession(session, process, errors)
        finally:
            with anyio.CancelScope(shield=True):
                stdin.close()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), 2)
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            group.cancel_scope.cancel()


@pytest.fixture
def stdio_session() -> Callable[[asyncio.subprocess.Process], contextlib.AbstractAsyncContextManager[StdioSession]]:
    return _stdio_session


def tool_text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


@pytest.fixture
def text_of() -> Callable[[Any], str]:
    return tool_text


@dataclass
class LoopbackSite:
    """An HTTP server on 127.0.0.1 that counts the requests it gets."""

    server: ThreadingHTTPServer
    body: bytes
    hits: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])


def _serve(body: bytes) -> LoopbackSite:
    site: LoopbackSite

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            site.hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(site.body)))
            self.end_headers()
            self.wfile.write(site.body)

    site = LoopbackSite(ThreadingHTTPServer(("127.0.0.1", 0), Handler), body)
    threading.Thread(target=site.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return site


@pytest.fixture
def loopback_sites() -> Iterator[Callable[[bytes], LoopbackSite]]:
    sites: list[LoopbackSite] = []

    def make(body: bytes) -> LoopbackSite:
        sites.append(_serve(body))
        return sites[-1]

    yield make
    for site in sites:
        site.server.shutdown()
        site.server.server_close()
