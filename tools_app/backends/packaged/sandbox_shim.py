"""Runs inside a sandbox that may reach listed hosts: the door from its network to the proxy.

A sandbox has its own network namespace holding only a loopback interface, so nothing in it
can open a connection out. When the policy lists hosts, ``spawn`` starts this script (with
the system Python, standard library only, ``-I``) as the parent of the server: it listens
on ``127.0.0.1:PORT`` inside the namespace, forwards every connection byte for byte to the
Unix socket of the host-side proxy (bind-mounted into the sandbox), and runs the server
with ``HTTP_PROXY``/``HTTPS_PROXY`` pointing at it. The proxy decides; this script decides
nothing. It exits with the server's exit status and passes on SIGTERM/SIGINT/SIGHUP.

Usage: python3 -I sandbox_shim.py PORT SOCKET_PATH -- ARGV...
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def _serve(port: int, socket_path: str, argv: list[str]) -> int:
    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            proxy_reader, proxy_writer = await asyncio.open_unix_connection(socket_path)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, proxy_writer), _pipe(proxy_reader, writer))
        writer.close()
        proxy_writer.close()

    server = await asyncio.start_server(forward, "127.0.0.1", port)
    process = await asyncio.create_subprocess_exec(*argv)  # inherits stdin, stdout, stderr
    # The server's stdio belongs to the server alone: nothing this script does reaches it.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, process.send_signal, signum)
    code = await process.wait()
    server.close()
    return code if code >= 0 else 128 - code


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 4 or args[2] != "--":
        sys.exit("usage: sandbox_shim.py PORT SOCKET_PATH -- ARGV...")
    sys.exit(asyncio.run(_serve(int(args[0]), args[1], args[3:])))


if __name__ == "__main__":
    main()
