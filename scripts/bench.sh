#!/usr/bin/env bash
# `make bench`: a benchmark from bench/ (BENCH=echo_bench by default, or background_bench).
# Each brings its own database (a SQLite file, or PostgreSQL toolbay_bench for
# background_bench) and uses Redis db 13 (BENCH_REDIS_URL), which it flushes.
# Arguments: make bench BENCH_ARGS="--sessions 1 32 --seconds 5"
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

trap 'stop_children' EXIT
trap 'stop_children; exit 130' INT
trap 'stop_children; exit 143' TERM

BENCH="${BENCH:-echo_bench}"
if [[ ! -f "bench/$BENCH.py" ]]; then
    die "there is no bench/$BENCH.py." "Available: $(find bench -maxdepth 1 -name '*_bench.py' -printf '%f ' | sed 's/\.py//g')"
fi
ensure_requirements dev # daphne, for --servers daphne
export BENCH_REDIS_URL="${BENCH_REDIS_URL:-redis://127.0.0.1:6379/13}"
ensure_redis "$BENCH_REDIS_URL"
if grep -q BENCH_DATABASE_URL "bench/$BENCH.py"; then
    ensure_postgres "${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/toolbay_bench}"
fi
say "python -m bench.$BENCH ${BENCH_ARGS:-}"
# shellcheck disable=SC2086 # BENCH_ARGS is a list of words on purpose
"$PY" -m "bench.$BENCH" ${BENCH_ARGS:-}
