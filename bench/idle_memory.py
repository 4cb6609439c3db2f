"""Where an idle session's memory goes: tracemalloc inside one server process.

    python -m bench.idle_memory [--sessions 1000] [--frames 8] [--top 25] [--app bench.reference_app:stream_app]

One uvicorn (the production configuration, the other benches' flags: uvloop, httptools,
no access log) serves the app with tracemalloc on. The bench opens ``--sessions`` sessions
as ``fanout_bench`` does (each its own connection: ``initialize``, then its standalone GET
stream, left idle), and the server compares a snapshot taken before them with one taken
after, each after a full collection: what is left is what the idle sessions hold. It
prints, per session, the growth of resident memory and of what tracemalloc sees (Python's
allocator: objects, frames, buffers; not uvloop's or httptools' own C allocations), and
the allocations that grew most, by line (``--top``) and by traceback (``--frames`` deep,
the innermost first). With ``--app bench.reference_app:stream_app`` the same for the bare
ASGI server holding an SSE stream (the floor). Garbage the collector had not yet freed when
the sessions were open is counted apart (the server's thresholds are the production ones).
Uses PostgreSQL BENCH_DATABASE_URL (default toolbay_bench, recreated) and Redis
BENCH_REDIS_URL (default db 13).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench.background_bench import fresh_stores, production_env
from bench.echo_bench import LOOPBACK_CLIENTS, ROOT, free_port, prepare, wait_for_port
from bench.fanout_bench import Listener, rss_kib

APP = "mcp_platform.asgi:application"
# tracemalloc's own bookkeeping and the import machinery are not the application's.
IGNORED = (
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
    tracemalloc.Filter(False, "<unknown>"),
)


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def allocators() -> dict[str, float]:
    """KiB held by the process (resident), by Python's small-object allocator (its arenas, and
    the blocks in use in them) and by the C allocator (in use, and obtained from the system)."""
    read, write = os.pipe()
    saved = os.dup(2)
    os.dup2(write, 2)
    try:
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    pymalloc = {}
    for line in text.splitlines():
        name, _, value = line.partition("=")
        if line.startswith("#") and value.strip().replace(",", "").isdigit():
            pymalloc[name.strip("# ").strip()] = int(value.strip().replace(",", ""))
    mallinfo = ctypes.CDLL(None).mallinfo2
    mallinfo.restype = _MallInfo2
    info = mallinfo()
    figures = {"resident": float(rss_kib(os.getpid()))}
    if pymalloc:  # none while tracemalloc hooks the allocators
        figures["pymalloc arenas"] = pymalloc["arenas allocated current"] * 1024
        figures["pymalloc blocks in use"] = pymalloc["bytes in allocated blocks"] / 1024
    figures["malloc in use"] = (info.uordblks + info.hblkhd) / 1024
    figures["malloc from the system"] = (info.arena + info.hblkhd) / 1024
    return figures


def serve(app: str, port: int, frames: int, dump: Path) -> None:
    """The server side: uvicorn under tracemalloc; SIGUSR1 writes ``<n>.raw`` (as it is) and
    ``<n>.snap`` (after a full collection) into ``dump``."""
    import uvicorn

    if frames:
        tracemalloc.start(frames)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)
    taken = 0

    def snapshot() -> None:
        nonlocal taken
        taken += 1
        (dump / f"{taken}.raw.json").write_text(json.dumps(allocators()))
        if frames:
            tracemalloc.take_snapshot().dump(str(dump / f"{taken}.raw"))
        gc.collect()
        if frames:
            tracemalloc.take_snapshot().dump(str(dump / f"{taken}.snap"))
        (dump / f"{taken}.done").touch()

    async def main() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, snapshot)
        await server.serve()

    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(main())


def take(process: subprocess.Popen[bytes], dump: Path, n: int) -> None:
    process.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 600
    while not (dump / f"{n}.done").exists():
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError("the server wrote no snapshot")
        time.sleep(0.2)


async def open_sessions(url: str, key: str | None, sessions: int, bare: bool) -> list[Listener]:
    listeners = [Listener(url, key) for _ in range(sessions)]

    async def open_bare(listener: Listener) -> None:
        conn = listener.conn
        await conn.open()
        conn.writer.write(
            f"GET / HTTP/1.1\r\nHost: localhost:{conn.port}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        buffer = b""
        while b"retry: 1000" not in buffer:
            buffer += await conn.reader.read(4096)

    for batch in range(0, sessions, 50):
        await asyncio.gather(*(open_bare(x) if bare else x.open() for x in listeners[batch : batch + 50]))
    await asyncio.sleep(1.0)
    return listeners


async def measure(
    server: subprocess.Popen[bytes], dump: Path, url: str, key: str | None, sessions: int, bare: bool
) -> None:
    """Open the sessions between the two snapshots."""
    if not bare:  # the first session loads the catalog and the process's connections
        warm = await open_sessions(url, key, 1, bare)
    await asyncio.to_thread(take, server, dump, 1)
    listeners = await open_sessions(url, key, sessions, bare)
    await asyncio.to_thread(take, server, dump, 2)
    for listener in [*listeners, *([] if bare else warm)]:
        listener.conn.close()


def report(dump: Path, sessions: int, top: int) -> None:
    first, second = (json.loads((dump / f"{n}.raw.json").read_text()) for n in (1, 2))
    print(f"{sessions} idle sessions; per session, KiB:")
    for name in first:
        print(f"  {name:<24} {(second[name] - first[name]) / sessions:6.2f}")
    if not (dump / "1.snap").exists():
        return
    before = tracemalloc.Snapshot.load(str(dump / "1.snap")).filter_traces(IGNORED)
    after = tracemalloc.Snapshot.load(str(dump / "2.snap")).filter_traces(IGNORED)
    raw = tracemalloc.Snapshot.load(str(dump / "2.raw")).filter_traces(IGNORED)

    def total(snapshot: tracemalloc.Snapshot) -> int:
        return sum(stat.size for stat in snapshot.statistics("filename"))

    held = (total(after) - total(before)) / sessions / 1024
    garbage = (total(raw) - total(after)) / sessions / 1024
    print(f"  tracemalloc, held        {held:6.2f} (tracemalloc's own memory is in the figures above)")
    print(f"  garbage not yet collected when measured: {garbage:.2f} KiB")
    print(f"\nby line (bytes and blocks per session; top {top}):")
    for stat in after.compare_to(before, "lineno")[:top]:
        frame = stat.traceback[0]
        print(f"  {stat.size_diff / sessions:8.1f} B {stat.count_diff / sessions:6.2f}  {_where(frame)}")
    owners: dict[str, list[float]] = {}
    for stat in after.compare_to(before, "traceback"):
        owner = _owner(stat.traceback)
        size_count = owners.setdefault(owner, [0.0, 0.0])
        size_count[0] += stat.size_diff / sessions
        size_count[1] += stat.count_diff / sessions
    print(f"\nby the innermost line of this repository's code on the way (else the library's; top {top}):")
    for owner, (size, count) in sorted(owners.items(), key=lambda item: -item[1][0])[:top]:
        print(f"  {size:8.1f} B {count:6.2f}  {owner}")
    print(f"\nby traceback, innermost frame first (top {top}):")
    for stat in after.compare_to(before, "traceback")[:top]:
        print(f"  {stat.size_diff / sessions:8.1f} B {stat.count_diff / sessions:6.2f}")
        for frame in reversed(stat.traceback):
            print(f"        {_where(frame)}")


def _owner(traceback: tracemalloc.Traceback) -> str:
    frames = list(reversed(traceback))  # innermost first
    for frame in frames:
        if (
            frame.filename.startswith(str(ROOT) + "/")
            and "/.venv/" not in frame.filename
            and "/bench/" not in frame.filename
        ):
            return _where(frame)
    return _where(frames[0])


def _where(frame: tracemalloc.Frame) -> str:
    name = frame.filename
    for prefix in (str(ROOT) + "/", *sorted((p + "/" for p in sys.path if p), key=len, reverse=True)):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    return f"{name}:{frame.lineno}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--app", default=APP)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the server process: its port
    parser.add_argument("--dump", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.app, args.serve, args.frames, args.dump)
        return
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 20000), hard))
    bare = args.app != APP
    env = production_env(MCP_SSE_KEEPALIVE_SECONDS="60", **LOOPBACK_CLIENTS)
    key = None
    if not bare:
        fresh_stores()
        key = prepare(env)
    with tempfile.TemporaryDirectory() as directory:
        dump = Path(directory)
        port = free_port()
        command = [sys.executable, "-m", "bench.idle_memory", "--app", args.app, "--frames", str(args.frames)]
        server = subprocess.Popen([*command, "--serve", str(port), "--dump", directory], cwd=ROOT, env=env)
        try:
            wait_for_port(port, timeout=120)
            url = f"http://127.0.0.1:{port}" + ("" if bare else "/mcp/demo")
            asyncio.run(measure(server, dump, url, key, args.sessions, bare))
            report(dump, args.sessions, args.top)
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()


if __name__ == "__main__":
    main()
