"""Many tenants on one server process: memory per cached tenant, each tenant's first
session (cold catalog), RSS under the catalog cache's byte budget, and unknown slugs.

    python -m bench.tenants_bench [--tenants 10000] [--tools 20] [--budget-mib 64] [--runs 3]

Toolbay in its production configuration (DEBUG=0, PostgreSQL, limits and the audit writer
on) on its own database (BENCH_DATABASE_URL, default toolbay_tenants_bench, dropped and
recreated) and Redis db (BENCH_REDIS_URL). ``seed_demo`` gives the platform catalog; the bench
adds ``--platform-tools`` platform tools, the first 10 granted to every tenant by one platform
rule, the rest granted to nobody. Then ``--tenants`` tenants, each with ``--tools`` private
tools (schemas and descriptions of its own: nothing is identical between tenants), one
tenant-owned rule granting them and one API key, inserted with a few INSERT ... SELECT.

Each run starts one uvicorn and one audit writer and then, tenant after tenant, opens that
tenant's first session: initialize, notifications/initialized, tools/list, one tools/call
(its catalog is cold). It reports

- the first session's time (the four requests, loopback client), p50 and p99 over tenants,
  and the server's CPU time per first session; then the same for a second session of the
  last tenth of the tenants (catalogs cached), so the cold load's share shows in one run;
- the server's RSS every tenth of the way; memory per cached tenant is the slope between the
  first and the last tenth, measured with a budget that holds every tenant (``--budget-mib 0``
  then means "as much as it takes");
- the same walk with the catalog cache bounded by ``--budget-mib``: RSS levels off;
- 100,000 requests to distinct unknown slugs (``--unknown``), on a server of their own: RSS
  before and after (both after a warm-up of 10,000), and the "unknown_tenants" cache's misses
  (one query each) for distinct slugs and for one slug asked again and again
  (``--unknown-only`` runs just this).

Each measure is reported per run and as the median of the runs with their spread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import string
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis

from bench.echo_bench import BENCH_REDIS, ROOT, free_port, production_settings, server_command, wait_for_port
from bench.loadgen import Connection
from bench.measure import cpu_ms, rss_kib

BENCH_DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolbay_tenants_bench")
METRICS_TOKEN = "tenants-bench-metrics"
GRANTED_PLATFORM_TOOLS = 10

SEED = """
INSERT INTO tenants_tenant (slug, name, is_active, allow_anonymous, api_keys_enabled, tool_listing, created_at,
    updated_at)
SELECT 'bench-' || i, 'Bench tenant ' || i, true, false, true, 'list', now(), now()
FROM generate_series(1, %(tenants)s) AS i;

INSERT INTO tenants_apikey (tenant_id, name, prefix, key_hash, scopes, tool_listing, created_at)
SELECT t.id, 'bench', lpad(to_hex(t.id), 12, '0'),
       encode(sha256(convert_to('tbk_' || lpad(to_hex(t.id), 12, '0') || '_bench-secret-' || t.id, 'UTF8')), 'hex'),
       '[]', '', now()
FROM tenants_tenant AS t WHERE t.slug LIKE 'bench-%%';

INSERT INTO tools_app_tool (tenant_id, name, title, description, input_schema, output_schema, read_only_hint,
    icons, tags, backend_kind, backend_config, execution_mode, task_support, timeout_seconds, enabled, version,
    created_at, updated_at, confirmation, always_visible)
SELECT t.id, 'tool_' || lpad(j::text, 2, '0'), '',
       'Tool ' || j || ' of ' || t.slug || ': echoes the text it is given, the number of times asked.',
       '{"type": "object", "properties": {"text": {"type": "string", "description": "What ' || t.slug
         || ' wants echoed by tool ' || j || '."}, "times": {"type": "integer", "minimum": 1}}, "required": ["text"]}',
       NULL, true, '[]', '[]', 'python', '{"handler": "demo.echo"}', 'inline', 'forbidden', 30, true, 1,
       now(), now(), 'none', false
FROM tenants_tenant AS t CROSS JOIN generate_series(0, %(tools)s - 1) AS j WHERE t.slug LIKE 'bench-%%';

INSERT INTO tools_app_accessrule (effect, tool_pattern, scopes, note, created_at, updated_at, owner_id, tenant_id,
    kind, oauth_groups, oauth_subjects, confirmation, enabled, always_visible)
SELECT 'allow', '*', '[]', '', now(), now(), t.id, t.id, 'tool', '[]', '[]', '', true, false
FROM tenants_tenant AS t WHERE t.slug LIKE 'bench-%%';

INSERT INTO tools_app_tool (tenant_id, name, title, description, input_schema, output_schema, read_only_hint,
    icons, tags, backend_kind, backend_config, execution_mode, task_support, timeout_seconds, enabled, version,
    created_at, updated_at, confirmation, always_visible)
SELECT NULL, 'platform_' || lpad(k::text, 3, '0'), '', 'Platform tool ' || k || ', the same for every tenant.',
       '{"type": "object", "properties": {"query": {"type": "string", "description": "What to look up."}}}',
       NULL, true, '[]', (CASE WHEN k < %(granted)s THEN '["bench-shared"]' ELSE '[]' END)::jsonb, 'python',
       '{"handler": "demo.echo"}', 'inline', 'forbidden', 30, true, 1, now(), now(), 'none', false
FROM generate_series(0, %(platform)s - 1) AS k;

INSERT INTO tools_app_accessrule (effect, tool_pattern, scopes, note, created_at, updated_at, kind, oauth_groups,
    oauth_subjects, confirmation, enabled, always_visible)
VALUES ('allow', 'tag:bench-shared', '[]', '', now(), now(), 'tool', '[]', '[]', '', true, false);
ANALYZE
"""


def raw_key(tenant_id: int) -> str:
    return f"tbk_{tenant_id:012x}_bench-secret-{tenant_id}"


def recreate_database() -> None:
    base, _, name = BENCH_DATABASE_URL.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def environment(budget_bytes: int) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "DATABASE_URL": BENCH_DATABASE_URL,
        "REDIS_URL": BENCH_REDIS,
        "CHANNEL_LAYER_PREFIX": "toolbay-tenants-bench:asgi",
        "LOG_LEVEL": "WARNING",
        "METRICS_TOKEN": METRICS_TOKEN,
        "TOOLBAY_MAX_CONNECTIONS_PER_CLIENT": "0",
        "TOOLBAY_CATALOG_CACHE_BYTES": str(budget_bytes),
        **production_settings(),
    }


def seed(tenants: int, tools: int, platform: int) -> list[tuple[int, str]]:
    """The bench tenants (id, slug), in creation order."""
    env = environment(0)
    recreate_database()
    redis.Redis.from_url(BENCH_REDIS).flushdb()
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    subprocess.run([*manage, "seed_demo"], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    started = time.perf_counter()
    with psycopg.connect(BENCH_DATABASE_URL, autocommit=True) as conn:
        params = {"tenants": tenants, "tools": tools, "platform": platform, "granted": GRANTED_PLATFORM_TOOLS}
        for statement in SEED.split(";\n"):
            if statement.strip():
                conn.execute(statement.encode(), params if "%(" in statement else None)
        rows = conn.execute("SELECT id, slug FROM tenants_tenant WHERE slug LIKE 'bench-%' ORDER BY id").fetchall()
    print(f"seeded {tenants} tenants x {tools} tools in {time.perf_counter() - started:.1f} s", flush=True)
    return [(int(pk), str(slug)) for pk, slug in rows]


def load_average() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


@dataclass
class Server:
    env: dict[str, str]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    port: int = 0

    def start(self) -> None:
        self.port = free_port()
        self.processes.append(
            subprocess.Popen(
                server_command("uvicorn", "mcp_platform.asgi:application", self.port, access_log=True),
                cwd=ROOT,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        self.processes.append(
            subprocess.Popen(
                [sys.executable, "manage.py", "audit_writer"],
                cwd=ROOT,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        wait_for_port(self.port)

    @property
    def pid(self) -> int:
        return self.processes[0].pid

    def url(self, slug: str) -> str:
        return f"http://127.0.0.1:{self.port}/mcp/{slug}"

    def cache_metrics(self) -> dict[str, float]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
        found = {}
        for line in text.splitlines():
            if line.startswith("toolbay_cache_"):
                name, value = line.rsplit(" ", 1)
                found[name] = float(value)
        return found

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.wait(30)
        self.processes.clear()


async def first_session(url: str, key: str) -> float:
    """A tenant's first session, as an agent opens it; its time in ms."""
    conn = Connection(url, key)
    await conn.open()
    try:
        started = time.perf_counter()
        await conn.initialize()
        status, _, data = await conn.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        if status != 200 or data.count(b'"name":"tool_') < 1:
            raise RuntimeError(f"tools/list answered {status}: {data[:200]!r}")
        status, _, data = await conn.post(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "tool_00", "arguments": {"text": "hello"}},
            }
        )
        if status != 200 or b'"isError":true' in data or b'"error"' in data:
            raise RuntimeError(f"tools/call answered {status}: {data[:200]!r}")
        return (time.perf_counter() - started) * 1000
    finally:
        conn.close()


@dataclass
class Walk:
    times: list[float]  # each session's time, ms
    checkpoints: list[tuple[int, int]]  # (tenants done, RSS KiB)
    cpu_ms_per_session: float  # the server's CPU time (its own clock: 10 ms ticks), averaged


async def walk(server: Server, tenants: list[tuple[int, str]]) -> Walk:
    """A session of every tenant in turn."""
    times: list[float] = []
    checkpoints = [(0, rss_kib(server.pid))]
    step = max(1, len(tenants) // 10)
    cpu_before = cpu_ms(server.pid)
    for done, (pk, slug) in enumerate(tenants, start=1):
        times.append(await first_session(server.url(slug), raw_key(pk)))
        if done % step == 0 or done == len(tenants):
            checkpoints.append((done, rss_kib(server.pid)))
    return Walk(times, checkpoints, (cpu_ms(server.pid) - cpu_before) / len(tenants))


async def unknown_slugs(server: Server, requests: int, *, distinct: bool, concurrency: int = 8) -> None:
    """``requests`` initializes to slugs no tenant has (404), ``concurrency`` at a time."""
    alphabet = string.ascii_lowercase + string.digits
    connections = [Connection(server.url("x"), raw_key(1)) for _ in range(concurrency)]
    for conn in connections:
        await conn.open()
    remaining = requests

    async def worker(conn: Connection) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            slug = "".join(random.choices(alphabet, k=16)) if distinct else "no-such-tenant"
            conn.path = f"/mcp/{slug}"
            status, headers, _ = await conn.post(
                {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
            )
            if status != 404:
                raise RuntimeError(f"an unknown slug answered {status}")
            if headers.get("connection") == "close":  # answered before its body was read
                conn.close()
                await conn.open()

    await asyncio.gather(*(worker(conn) for conn in connections))
    for conn in connections:
        conn.close()


def percentile(data: list[float], q: float) -> float:
    ordered = sorted(data)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def slope_kib_per_tenant(checkpoints: list[tuple[int, int]]) -> float:
    (n0, r0), (n1, r1) = checkpoints[1], checkpoints[-1]
    return (r1 - r0) / (n1 - n0) if n1 > n0 else float("nan")


def cache_metric(metrics: dict[str, float], name: str, cache: str) -> float:
    return metrics[f'toolbay_cache_{name}{{cache="{cache}"}}']


def one_run(tenants: list[tuple[int, str]], budget_bytes: int, unknown: int) -> dict[str, float]:
    result: dict[str, float] = {}
    # Unbounded enough to hold every tenant: what one cached tenant costs.
    server = Server(environment(64 * 1024**3))
    server.start()
    try:
        cold = asyncio.run(walk(server, tenants))
        metrics = server.cache_metrics()
        # The same sessions again on the last tenth, catalogs cached: what the cold load adds.
        warm = asyncio.run(walk(server, tenants[-max(1, len(tenants) // 10) :]))
    finally:
        server.stop()
    times, checkpoints = cold.times, cold.checkpoints
    result["first_session_p50_ms"] = percentile(times, 0.5)
    result["first_session_p99_ms"] = percentile(times, 0.99)
    result["warm_session_p50_ms"] = percentile(warm.times, 0.5)
    result["warm_session_p99_ms"] = percentile(warm.times, 0.99)
    result["first_session_server_cpu_ms"] = cold.cpu_ms_per_session
    result["warm_session_server_cpu_ms"] = warm.cpu_ms_per_session
    result["mib_per_cached_tenant"] = slope_kib_per_tenant(checkpoints) / 1024
    result["catalog_estimate_mib_per_tenant"] = cache_metric(metrics, "bytes", "catalog") / len(tenants) / 1024**2
    result["rss_unbounded_mib"] = checkpoints[-1][1] / 1024
    print(
        f"  unbounded: first session p50 {result['first_session_p50_ms']:.2f} ms, p99"
        f" {result['first_session_p99_ms']:.2f} ms, server CPU {cold.cpu_ms_per_session:.2f} ms (warm, catalog"
        f" cached: p50 {result['warm_session_p50_ms']:.2f} ms, p99 {result['warm_session_p99_ms']:.2f} ms, CPU"
        f" {warm.cpu_ms_per_session:.2f} ms); {result['mib_per_cached_tenant']:.4f} MiB per cached tenant"
        f" (estimate {result['catalog_estimate_mib_per_tenant']:.4f}); RSS by tenants done"
        f" {[(n, round(r / 1024)) for n, r in checkpoints]} MiB",
        flush=True,
    )
    server = Server(environment(budget_bytes))
    server.start()
    try:
        bounded = asyncio.run(walk(server, tenants))
        times, checkpoints = bounded.times, bounded.checkpoints
        metrics = server.cache_metrics()
        result["bounded_first_session_p99_ms"] = percentile(times, 0.99)
        result["rss_bounded_mib"] = checkpoints[-1][1] / 1024
        result["rss_bounded_at_half_mib"] = checkpoints[len(checkpoints) // 2][1] / 1024
        result["evictions"] = cache_metric(metrics, "evictions_total", "catalog")
        print(
            f"  budget {budget_bytes / 1024**2:.0f} MiB: RSS by tenants done"
            f" {[(n, round(r / 1024)) for n, r in checkpoints]} MiB; catalog bytes"
            f" {cache_metric(metrics, 'bytes', 'catalog') / 1024**2:.1f} MiB,"
            f" {cache_metric(metrics, 'entries', 'catalog'):.0f} entries,"
            f" {result['evictions']:.0f} evictions; first session p99 {result['bounded_first_session_p99_ms']:.2f} ms",
            flush=True,
        )
    finally:
        server.stop()
    if unknown:
        result.update(unknown_phase(budget_bytes, unknown))
    return result


def unknown_phase(budget_bytes: int, unknown: int) -> dict[str, float]:
    """Unknown slugs on a server of their own: nothing else (a walk, a scrape of 10,000
    tenants' counters) moves its RSS meanwhile."""
    result: dict[str, float] = {}
    server = Server(environment(budget_bytes))
    server.start()
    try:
        asyncio.run(unknown_slugs(server, 10_000, distinct=True))  # fill the bounded structures
        misses_before = cache_metric(server.cache_metrics(), "misses_total", "unknown_tenants")
        before = rss_kib(server.pid)
        started = time.perf_counter()
        asyncio.run(unknown_slugs(server, unknown, distinct=True))
        seconds = time.perf_counter() - started
        after = rss_kib(server.pid)
        metrics = server.cache_metrics()
        distinct_misses = cache_metric(metrics, "misses_total", "unknown_tenants") - misses_before
        started = time.perf_counter()
        asyncio.run(unknown_slugs(server, 20_000, distinct=False))
        repeat_seconds = time.perf_counter() - started
        repeated = server.cache_metrics()
        repeat_misses = cache_metric(repeated, "misses_total", "unknown_tenants") - (
            cache_metric(metrics, "misses_total", "unknown_tenants")
        )
        result["unknown_rss_growth_mib"] = (after - before) / 1024
        result["unknown_per_s"] = unknown / seconds
        print(
            f"  {unknown} distinct unknown slugs in {seconds:.1f} s: RSS {before / 1024:.1f} -> {after / 1024:.1f}"
            f" MiB ({(after - before) / 1024:+.2f}); {distinct_misses:.0f} lookups (one per new slug);"
            f" 20000 requests to one unknown slug in {repeat_seconds:.1f} s: {repeat_misses:.0f} lookups"
            f" (one per 5 s remembered); {cache_metric(repeated, 'entries', 'unknown_tenants'):.0f}"
            " slugs remembered",
            flush=True,
        )
    finally:
        server.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--tools", type=int, default=20)
    parser.add_argument("--platform-tools", type=int, default=50)
    parser.add_argument("--budget-mib", type=float, default=64.0, help="the catalog cache budget of the bounded walk")
    parser.add_argument("--unknown", type=int, default=100_000, help="requests to unknown slugs (0: skip)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--unknown-only", action="store_true", help="only the unknown slugs (no tenants walked)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    tenants = seed(args.tenants, args.tools, args.platform_tools)
    runs = []
    for run in range(args.runs):
        print(f"run {run + 1}/{args.runs} (load average {load_average()}):", flush=True)
        redis.Redis.from_url(BENCH_REDIS).flushdb()  # no sessions left from the last run
        if args.unknown_only:
            runs.append(unknown_phase(int(args.budget_mib * 1024**2), args.unknown))
        else:
            runs.append(one_run(tenants, int(args.budget_mib * 1024**2), args.unknown))
    print(f"median of {len(runs)} runs [min - max]:")
    for name in runs[0]:
        values = [run[name] for run in runs]
        print(f"  {name:40s} {statistics.median(values):10.4f}  [{min(values):.4f} - {max(values):.4f}]")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
