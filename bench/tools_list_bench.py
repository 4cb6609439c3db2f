"""``tools/list`` with many visible tools: Toolbay against the official SDK server, same run.

    python -m bench.tools_list_bench [--tools 1000] [--seconds 5]

Both servers hold the same number of tools (the same two-argument schema, a description and
annotations). Toolbay runs its production configuration (DEBUG=0, PostgreSQL toolbay_bench,
access rules and the audit writer on) and pages the list (MCP_PAGE_SIZE, 100 by default);
the SDK answers the whole list at once. Printed per server, one session, requests back to
back: the latency of one ``tools/list`` request (Toolbay: its first page) and of listing every
tool (Toolbay: following ``nextCursor`` to the end). On loopback with a keep-alive connection
the latency is the server's time plus a few tens of microseconds of client and network.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.background_bench import fresh_stores, production_env
from bench.echo_bench import ROOT, free_port, server_command, wait_for_port
from bench.loadgen import Connection
from bench.vs_sdk import Deployment

TOOLS = """
from tenants.models import Tenant
from tools_app.catalog.models import AccessRule, Tool
demo = Tenant.objects.get(slug="demo")
schema = {{"type": "object", "properties": {{"text": {{"type": "string"}}, "count": {{"type": "integer"}}}},
          "required": ["text"]}}
Tool.objects.bulk_create(Tool(
    tenant=None, name=f"tool_{{i:04d}}", title=f"Tool {{i}}", tags=["bench"], input_schema=schema,
    description=f"Benchmark tool {{i}}: says the text back, count times.", read_only_hint=True,
    backend_config={{"handler": "demo.echo"}}) for i in range({count}))
AccessRule.objects.get_or_create(tool=None, tool_pattern="tag:bench", tenant=demo, effect="allow")
"""

LIST = {"jsonrpc": "2.0", "method": "tools/list", "params": {}}


async def page(conn: Connection, cursor: str | None, request_id: int) -> tuple[int, str | None]:
    params = {"cursor": cursor} if cursor else {}
    status, _, data = await conn.post({**LIST, "params": params, "id": request_id})
    if status != 200:
        raise RuntimeError(f"tools/list answered {status}: {data[:200]!r}")
    result = json.loads(data)["result"]
    return len(result["tools"]), result.get("nextCursor")


async def measure(url: str, key: str | None, seconds: float, expected: int) -> dict[str, float]:
    conn = Connection(url, key)
    await conn.open()
    await conn.initialize()
    first: list[float] = []
    full: list[float] = []
    request_id = 0
    warm_until = time.perf_counter() + 1.0
    stop_at = warm_until + seconds
    while (started := time.perf_counter()) < stop_at:
        count, cursor, pages = 0, None, 0
        while True:
            page_started = time.perf_counter()
            request_id += 1
            got, cursor = await page(conn, cursor, request_id)
            if pages == 0 and started >= warm_until:
                first.append((time.perf_counter() - page_started) * 1000)
            count, pages = count + got, pages + 1
            if not cursor:
                break
        if count < expected:
            raise RuntimeError(f"listed {count} tools, expected at least {expected}")
        if started >= warm_until:
            full.append((time.perf_counter() - started) * 1000)
    conn.close()
    return {
        "pages": pages,
        "first_p50_ms": round(statistics.median(first), 3),
        "first_p99_ms": round(sorted(first)[int(0.99 * (len(first) - 1))], 3),
        "all_p50_ms": round(statistics.median(full), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    env = production_env()
    fresh_stores()
    toolbay = Deployment("toolbay", env)
    toolbay.prepare()
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", TOOLS.format(count=args.tools)], cwd=ROOT, env=env, check=True
    )
    results: dict[str, dict[str, float]] = {}
    toolbay.start()
    try:
        results["toolbay"] = asyncio.run(measure(toolbay.url, toolbay.key, args.seconds, args.tools))
    finally:
        toolbay.stop()
    port = free_port()
    sdk = subprocess.Popen(
        server_command("uvicorn", "bench.sdk_server:app", port),
        cwd=ROOT,
        env={**env, "BENCH_SDK_TOOLS": str(args.tools)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        results["sdk"] = asyncio.run(measure(f"http://127.0.0.1:{port}/mcp", None, args.seconds, args.tools))
    finally:
        sdk.terminate()
        sdk.wait(20)

    for name, row in results.items():
        print(
            f"{name:8} one request p50 {row['first_p50_ms']:7.3f} ms p99 {row['first_p99_ms']:7.3f} ms | "
            f"all {args.tools} tools ({row['pages']} page(s)) p50 {row['all_p50_ms']:7.3f} ms",
            flush=True,
        )
    ours, peer = results["toolbay"], results["sdk"]
    print(
        f"ratio toolbay/sdk: one request x{ours['first_p50_ms'] / peer['first_p50_ms']:.2f}, "
        f"all tools x{ours['all_p50_ms'] / peer['all_p50_ms']:.2f}"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
