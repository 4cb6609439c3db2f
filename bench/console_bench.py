"""How fast the operator console's pages are on a big invocation log.

    python -m bench.console_bench [--rows 1000000] [--days 7] [--repeat 5] [--explain]

Uses a throw-away PostgreSQL database (BENCH_DATABASE_URL, default toolbay_console_bench
on the local server, dropped and recreated), migrates it, inserts ``--rows`` invocations
with one INSERT … SELECT over generate_series (10 tenants, the first with 40 % of the
traffic, 40 tools, ~10 % of calls not completed, spread over ``--days``), runs ANALYZE,
and then times each page through Django's test client: the view, its queries and the
template, as a superuser (all tenants) and as an operator of the busiest tenant. It ends
with a 100,000-row CSV export, measuring time and the peak of Python's allocations.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import psycopg

BENCH_DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolbay_console_bench")
TENANTS = 10
COLD = "_cold"

INSERT = """
WITH keys AS (
    SELECT k.id AS key_id, k.tenant_id, k.name || ' (' || k.prefix || ')' AS key_label,
        dense_rank() OVER (ORDER BY t.slug) - 1 AS tenant_rank,
        row_number() OVER (PARTITION BY k.tenant_id ORDER BY k.id) - 1 AS key_rank
    FROM tenants_apikey AS k JOIN tenants_tenant AS t ON t.id = k.tenant_id
), calls AS (
    SELECT g, random() AS r,
        CASE WHEN (g * 31) % 10 < 4 THEN 0 ELSE 1 + (g * 17) % 9 END AS tenant_rank, g % 3 AS key_rank
    FROM generate_series(1::bigint, __ROWS__) AS g
)
INSERT INTO audit_invocation (tenant_id, key_id, key_label, session_id, client_name, client_version, tool_id,
    tool_name, tool_version, arguments, outcome, error_message, duration_ms, run_id, is_task, started_at, finished_at)
SELECT keys.tenant_id, keys.key_id, keys.key_label, md5((g / 10)::text), 'bench-client', '1.0', NULL,
    'tool_' || (g * 7919 % 40), 1 + g % 3, '{"text": "hello"}'::jsonb,
    o.outcome,
    CASE o.outcome
        WHEN 'completed' THEN ''
        WHEN 'error' THEN 'upstream answered 502 for request ' || (g % 5000)
        WHEN 'invalid_arguments' THEN 'Input validation error: ''text'' failed rule ''type'''
        WHEN 'denied' THEN 'Unknown or forbidden tool'
        WHEN 'timed_out' THEN 'Tool timed out after 30 seconds'
        WHEN 'cancelled' THEN ''
        ELSE 'internal error (reference ' || md5((g % 997)::text) || ')'
    END,
    round((exp(random() * 6) + random() * 5)::numeric, 3)::float,
    CASE WHEN g % 20 = 0 THEN substr(md5((g + 1)::text), 1, 32) ELSE '' END,
    g % 100 = 0,
    now() - (g::float / __ROWS__) * interval '__DAYS__ days',
    now() - (g::float / __ROWS__) * interval '__DAYS__ days' + interval '20 milliseconds'
FROM calls
JOIN keys USING (tenant_rank, key_rank)
CROSS JOIN LATERAL (
    SELECT CASE WHEN r < 0.9 THEN 'completed' WHEN r < 0.94 THEN 'error' WHEN r < 0.96 THEN 'invalid_arguments'
        WHEN r < 0.975 THEN 'denied' WHEN r < 0.985 THEN 'timed_out' WHEN r < 0.99 THEN 'cancelled'
        ELSE 'failed' END AS outcome
) AS o
ORDER BY g DESC
"""


def recreate_database() -> None:
    base, _, name = BENCH_DATABASE_URL.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def setup_django() -> None:
    os.environ["DATABASE_URL"] = BENCH_DATABASE_URL
    os.environ.setdefault("REDIS_URL", os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"))
    os.environ["DJANGO_SETTINGS_MODULE"] = "mcp_platform.settings"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ["ALLOWED_HOSTS"] = "testserver"
    import django

    django.setup()


def populate(rows: int, days: int) -> None:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from tenants.services import api_key_create, membership_set, tenant_create

    call_command("migrate", verbosity=0)
    tenants = [tenant_create(slug=f"bench-{i:02d}", name=f"Bench {i}") for i in range(TENANTS)]
    for tenant in tenants:
        for n in range(3):
            api_key_create(tenant=tenant, name=f"key {n}")
    users = get_user_model().objects
    users.create_superuser("bench-root", password="x")
    membership_set(tenant=tenants[0], user=users.create_user("bench-op", password="x"), role="operator")
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(INSERT.replace("__ROWS__", str(int(rows))).replace("__DAYS__", str(int(days))))
        # A key with 0.25 % of its tenant's calls: the key filter must not scan the other 99.75 %.
        rare, _ = api_key_create(tenant=tenants[0], name="rare key")
        cursor.execute(
            "INSERT INTO audit_invocation (tenant_id, key_id, key_label, session_id, client_name, client_version,"
            " tool_name, arguments, outcome, error_message, duration_ms, run_id, is_task, started_at, finished_at)"
            " SELECT %s, %s, 'rare key', '', '', '', 'tool_1', '{}'::jsonb, 'completed', '', 1.0, '', false,"
            " now() - g * interval '1 minute', now() - g * interval '1 minute'"
            " FROM generate_series(1, %s) AS g",
            [tenants[0].pk, rare.pk, min(1000, rows // 400)],
        )
        cursor.execute("VACUUM ANALYZE audit_invocation")
    print(f"inserted {rows:,} invocations in {time.perf_counter() - started:.1f} s", flush=True)


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    result = fn()  # warm the caches (database pages, templates)
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples), result


def explain(sql: str, params: Any) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        for (line,) in cursor.fetchall():
            print("      " + line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--export-rows", type=int, default=100_000)
    parser.add_argument("--reuse", action="store_true", help="keep the database of a previous run")
    parser.add_argument("--explain", action="store_true", help="print the plan of each list query")
    args = parser.parse_args()

    if not args.reuse:
        recreate_database()
    setup_django()
    if not args.reuse:
        populate(args.rows, args.days)

    from django.contrib.auth import get_user_model
    from django.core.cache import cache
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from audit.models import Invocation
    from console import exports
    from console.keyset import Cursor
    from tenants.models import ApiKey, Tenant

    total = Invocation.objects.count()
    busiest = Tenant.objects.get(slug="bench-00")
    print(f"{total:,} invocations, {Invocation.objects.filter(tenant=busiest).count():,} in {busiest.slug}")
    key = ApiKey.objects.filter(tenant=busiest).order_by("pk").first()
    rare_key = ApiKey.objects.get(tenant=busiest, name="rare key")
    assert key is not None
    deep = Invocation.objects.filter(tenant=busiest).order_by("-started_at", "-id")[10_000]
    deep_cursor = Cursor.of(deep, "started_at").encode()
    detail = Invocation.objects.filter(tenant=busiest).order_by("-id").first()
    assert detail is not None

    pages = [
        ("invocations, newest", "/console/invocations/", {}),
        ("invocations, 10,000 rows deep (keyset)", "/console/invocations/", {"after": deep_cursor}),
        ("invocations, tool=tool_7", "/console/invocations/", {"tool": "tool_7"}),
        ("invocations, outcome=failed", "/console/invocations/", {"outcome": "failed"}),
        ("invocations, key (a third of the calls)", "/console/invocations/", {"key": key.pk}),
        ("invocations, key (0.25 % of the calls)", "/console/invocations/", {"key": rare_key.pk}),
        ("invocations, last hour", "/console/invocations/", {"range": "1h"}),
        ("invocations, search 'timed out' (1 %)", "/console/invocations/", {"q": "timed out"}),
        ("invocations, search 'request 4242' (rare)", "/console/invocations/", {"q": "request 4242"}),
        ("invocations, search 'tool_1' (tool names)", "/console/invocations/", {"q": "tool_1"}),
        ("invocation detail", f"/console/invocations/{detail.pk}/", {}),
        ("overview, last hour (computed)", "/console/", {"window": "hour", COLD: 1}),
        ("overview, last day (computed)", "/console/", {"window": "day", COLD: 1}),
        ("overview, last day (cached)", "/console/", {"window": "day"}),
        ("changes", "/console/changes/", {}),
    ]
    users = {
        "superuser (all tenants)": get_user_model().objects.get(username="bench-root"),
        f"operator of {busiest.slug}": get_user_model().objects.get(username="bench-op"),
    }
    print(f"\nmedian of {args.repeat} requests after one warm-up (Django test client: view + queries + template)")
    print(f"{'page':<44} " + " ".join(f"{name:>26}" for name in users))
    clients = {}
    for name, user in users.items():
        client = Client()
        client.force_login(user)
        clients[name] = client
    for label, url, params in pages:
        cells = []
        for client in clients.values():

            def get(client: Client = client, url: str = url, params: dict[str, Any] = params) -> Any:
                if COLD in params:
                    cache.clear()  # the overview's numbers are cached for a while; time computing them
                response = client.get(url, {name: value for name, value in params.items() if name != COLD})
                assert response.status_code == 200, (url, params, response.status_code)
                return response

            with CaptureQueriesContext(connection) as queries:
                ms, _ = timed(get, args.repeat)
            cells.append(f"{ms:9.1f} ms ({len(queries) // (args.repeat + 1):2d} queries)")
        print(f"{label:<44} " + " ".join(f"{cell:>26}" for cell in cells), flush=True)
        if args.explain:
            with CaptureQueriesContext(connection) as queries:
                clients[f"operator of {busiest.slug}"].get(url, params)
            heaviest = [q["sql"] for q in queries if "audit_invocation" in q["sql"]]
            for sql in heaviest[:3]:
                print("    " + sql[:300])
                explain(sql, None)

    # The export: the newest export_rows rows of the busiest tenant, streamed.
    since = Invocation.objects.filter(tenant=busiest).order_by("-started_at", "-id")[args.export_rows - 1].started_at
    client = clients[f"operator of {busiest.slug}"]
    params = {"tenant": busiest.slug, "since": since.isoformat()}

    def export(measure_memory: bool) -> tuple[float, float, int, int, int, int]:
        if measure_memory:
            tracemalloc.start()
        started = time.perf_counter()
        first_byte = size = lines = 0.0
        with CaptureQueriesContext(connection) as queries:
            response = client.get("/console/invocations/export.csv", params)
            for part in response.streaming_content:
                first_byte = first_byte or time.perf_counter() - started
                size += len(part)
                lines += part.count(b"\n")
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1] if measure_memory else 0
        tracemalloc.stop()
        return elapsed, first_byte, int(size), int(lines), len(queries), peak

    elapsed, first_byte, size, lines, queries, _ = export(measure_memory=False)
    *_, peak = export(measure_memory=True)  # tracemalloc slows Python down several times: a run of its own
    print(
        f"\nCSV export of {lines - 1:,} rows ({size / 1e6:.1f} MB): {elapsed:.2f} s, first bytes after "
        f"{first_byte * 1000:.0f} ms, {queries} queries ({exports.CHUNK_ROWS} rows each), "
        f"peak Python allocations {peak / 1e6:.1f} MB"
    )


if __name__ == "__main__":
    sys.exit(main())
