"""A failover proxy for tests: what a load balancer in front of several servers does.

Each client connection goes to the next server (round robin) that accepts it. A server
that closes the connection before it sent a byte of its answer (it was stopping and had
not taken the request yet) is replaced by the next one, with the request sent again, as
nginx does with ``proxy_next_upstream error``. The proxy reads one request per
connection, so clients must not reuse connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time

RETRY_FOR_SECONDS = 10.0


class FailoverProxy:
    def __init__(self, backend_ports: list[int]) -> None:
        self.backend_ports = backend_ports
        self.port = 0
        self.retried = 0  # requests a stopping server did not take, sent to another
        self._turn = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> FailoverProxy:
        self._thread.start()
        self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._started.set()
        self._loop.run_forever()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            request = await _read_request(client_reader)
            if request:
                await self._forward(request, client_reader, client_writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            client_writer.close()

    async def _forward(
        self, request: bytes, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        deadline = time.monotonic() + RETRY_FOR_SECONDS
        attempt = 0
        while True:
            port = self.backend_ports[next(self._turn) % len(self.backend_ports)]
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(request)
                await writer.drain()
                first = await reader.read(65536)
            except ConnectionError:
                first, writer = b"", None
            if first:
                break
            if writer is not None:
                writer.close()
            if time.monotonic() > deadline:
                return
            attempt += 1
            if attempt > 1:
                self.retried += 1
            # A load balancer's retry back-off (behaviour under test, not a wait): the other
            # backends at once, then a pause once every one refused (all restarting).
            await asyncio.sleep(0.05 if attempt > len(self.backend_ports) else 0)
        client_writer.write(first)
        pump = asyncio.ensure_future(_pump(reader, client_writer))
        gone = asyncio.ensure_future(client_reader.read())  # the client closed its side
        await asyncio.wait({pump, gone}, return_when=asyncio.FIRST_COMPLETED)
        for task in (pump, gone):
            task.cancel()
        writer.close()


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + (await reader.readexactly(length) if length else b"")


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
