"""Many sessions on two server processes: calls/s at 500 sessions against 32, in one run.

    python -m bench.scale_bench [--sessions 32 500] [--servers 2] [--seconds 8]

Toolbay in its production configuration (DEBUG=0, PostgreSQL toolbay_bench, limits and the
audit writer on), ``--servers`` uvicorn processes; the repo's load client opens every session
(each its own keep-alive connection, spread over the processes in turn) and calls ``echo``
back to back. The ratio is each size's calls/s over the first size's. ``cpu`` is the CPU time
(user + system) of the server's processes (the uvicorns and the audit writer) per request,
opening the sessions and the warm-up included.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.background_bench import fresh_stores, production_env
from bench.echo_bench import ECHO, LOOPBACK_CLIENTS
from bench.loadgen import run_load
from bench.vs_sdk import Deployment, measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[32, 500])
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    env = production_env(**LOOPBACK_CLIENTS)
    fresh_stores()
    toolbay = Deployment("toolbay", env)
    toolbay.prepare()
    toolbay.start(servers=args.servers)
    rows = []
    try:
        for n in args.sessions:
            pids = [process.pid for process in toolbay.processes]
            result, cpu_us = measured(pids, run_load(toolbay.urls, toolbay.key, n, args.seconds, ECHO, warmup=2.0))
            rows.append({"sessions": n, **result.summary(), "server_cpu_us_per_request": cpu_us})
            cpu = f"{cpu_us:6.0f} µs" if cpu_us is not None else "   n/a"
            base = rows[0]["calls_per_s"]
            print(
                f"N={n:<4} on {args.servers} processes: {result.rate:7.0f} calls/s"
                f"  p50 {result.percentile(0.5):7.2f} ms  p99 {result.percentile(0.99):7.2f} ms"
                f"  server CPU {cpu}/request"
                f"  x{result.rate / base:.2f} of N={args.sessions[0]}",
                flush=True,
            )
    finally:
        toolbay.stop()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
