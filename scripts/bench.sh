#!/usr/bin/env bash
# `make bench`: bench/echo_bench.py (tools/call throughput vs a bare ASGI reference).
# It brings its own SQLite file and uses Redis db 13 (BENCH_REDIS_URL), which it flushes.
# Arguments: make bench BENCH_ARGS="--sessions 1 32 --seconds 5 --servers uvicorn daphne"
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

trap 'stop_children' EXIT
trap 'stop_children; exit 130' INT
trap 'stop_children; exit 143' TERM

[[ -f bench/echo_bench.py ]] || die "bench/echo_bench.py is missing; there is nothing to run."
ensure_requirements dev # daphne, for --servers daphne
export BENCH_REDIS_URL="${BENCH_REDIS_URL:-redis://127.0.0.1:6379/13}"
ensure_redis "$BENCH_REDIS_URL"
say "python -m bench.echo_bench ${BENCH_ARGS:-}"
# shellcheck disable=SC2086 # BENCH_ARGS is a list of words on purpose
"$PY" -m bench.echo_bench ${BENCH_ARGS:-}
