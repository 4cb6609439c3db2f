#!/usr/bin/env bash
# `make conformance`: the official MCP conformance suite (@modelcontextprotocol/conformance)
# against a Toolbay server started just for it, in three passes on the same server:
#   stable           0.1.16 --suite all                         (protocol 2025-11-25)
#   alpha-2025-11-25 0.2.0-alpha.12 --requirements 2025-11-25
#   alpha-2026-07-28 0.2.0-alpha.12 --requirements 2026-07-28   (scored scenarios, plus the
#                    tasks-extension and pending ones it runs unscored: they must pass too)
#
# The server (uvicorn + a Celery worker) gets its own world, so no one's data is touched:
# a fresh SQLite file under var/conformance/, Redis db 14 (flushed), its own channel-layer prefix. There is
# no baseline: every scenario must pass. A pass fails when the suite fails (a FAILURE
# check) or when conformance/summarize.py finds a failing scenario (a FAILURE or a WARNING).
#
# Knobs: TOOLBAY_CONFORMANCE_REDIS_URL (redis://127.0.0.1:6379/14), CONFORMANCE_PASSES (some
# of the three names above), CONFORMANCE_SCENARIO (one scenario, run with the alpha suite
# instead of the passes), CONFORMANCE_TIMEOUT (seconds per pass, 900).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$ROOT"

# shellcheck source=conformance/suite.sh
source "$ROOT/conformance/suite.sh"
REDIS_URL_CONF="${TOOLBAY_CONFORMANCE_REDIS_URL:-redis://127.0.0.1:6379/14}"
WORK="$VAR/conformance"
RESULTS="$ROOT/conformance-results"

trap 'stop_children 10' EXIT
trap 'stop_children 10; exit 130' INT
trap 'stop_children 10; exit 143' TERM

ensure_requirements runtime
ensure_suite
ensure_redis "$REDIS_URL_CONF"
probe redis-flush "$REDIS_URL_CONF"

rm -rf "$WORK" "$RESULTS"
mkdir -p "$WORK"

# Everything the server reads comes from here, not from the caller's environment.
server_env=(
    DJANGO_SETTINGS_MODULE=mcp_platform.settings
    DEBUG=0
    SECRET_KEY="conformance-$(date +%s)-$RANDOM$RANDOM"
    TOOLBAY_SECRET_KEYS="$("$PY" -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')"
    "ALLOWED_HOSTS=localhost,127.0.0.1"
    MCP_ALLOWED_ORIGINS=
    MCP_TRUST_FORWARDED_HOST=0
    DATABASE_URL="sqlite:///$WORK/db.sqlite3"
    REDIS_URL="$REDIS_URL_CONF"
    CELERY_BROKER_URL="$REDIS_URL_CONF"
    CHANNEL_LAYER_PREFIX=toolbay-conformance:asgi
    TOOLBAY_ADMIN_PASSWORD="conformance-$RANDOM$RANDOM"
)

say "Preparing the server's database (var/conformance/db.sqlite3): migrate + seed_demo"
if ! env "${server_env[@]}" "$PY" manage.py migrate --noinput >"$WORK/setup.log" 2>&1 ||
    ! env "${server_env[@]}" "$PY" manage.py seed_demo >>"$WORK/setup.log" 2>&1; then
    cat "$WORK/setup.log" >&2
    die "could not prepare the conformance database (output above)."
fi

port="$(probe free-port)"
url="http://localhost:$port/mcp/conformance"
say "Starting uvicorn on 127.0.0.1:$port and a Celery worker (logs: var/conformance/server.log, worker.log)"
start_child "conformance server" "$WORK/server.log" env "${server_env[@]}" "$VENV/bin/uvicorn" \
    mcp_platform.asgi:application --host 127.0.0.1 --port "$port" --loop uvloop --http httptools \
    --log-level warning --no-access-log --timeout-graceful-shutdown 3 --forwarded-allow-ips "${TOOLBAY_TRUSTED_PROXIES:-}"
server_pid="$CHILD_PID"
# Background tools (execution mode "background") need a worker, as in any deployment.
start_child "conformance worker" "$WORK/worker.log" env "${server_env[@]}" "$VENV/bin/celery" -A mcp_platform \
    worker --loglevel WARNING --queues toolbay.short,toolbay.long --concurrency 2
deadline=$((SECONDS + 60))
until probe http "http://127.0.0.1:$port/healthz"; do
    if ! child_alive "$server_pid" || ((SECONDS >= deadline)); then
        tail -n 40 "$WORK/server.log" >&2
        die "the conformance server did not come up (log above)."
    fi
    sleep 0.2
done

# --url must say localhost: the dns-rebinding scenario checks Host handling with it.
run_pass() { # <name> <suite entry point> <selection...>: one suite run into conformance-results/<name>/
    local name="$1" entry="$2"
    shift 2
    local command=("$NODE" "$entry" server --url "$url" "$@" -o "$RESULTS/$name")
    command -v timeout >/dev/null && command=(timeout "${CONFORMANCE_TIMEOUT:-900}" "${command[@]}")
    say "Conformance pass $name: $*"
    local exit_code=0
    "${command[@]}" >"$WORK/$name.log" 2>&1 || exit_code=$?
    sed -n '/=== SUMMARY/,$p' "$WORK/$name.log"
    "$PY" "$ROOT/conformance/summarize.py" "$RESULTS/$name" || ((exit_code != 0)) || exit_code=1
    if ((exit_code != 0)); then
        warn "conformance pass $name failed (exit $exit_code); its output is in var/conformance/$name.log"
        failed+=("$name")
    fi
}

failed=()
if [[ -n "${CONFORMANCE_SCENARIO:-}" ]]; then
    run_pass "scenario" "$CONF_ALPHA" --scenario "$CONFORMANCE_SCENARIO"
else
    for pass in ${CONFORMANCE_PASSES:-stable alpha-2025-11-25 alpha-2026-07-28}; do
        case "$pass" in
            stable) run_pass stable "$CONF" --suite all ;;
            alpha-2025-11-25) run_pass alpha-2025-11-25 "$CONF_ALPHA" --requirements 2025-11-25 ;;
            alpha-2026-07-28) run_pass alpha-2026-07-28 "$CONF_ALPHA" --requirements 2026-07-28 ;;
            *) die "unknown conformance pass $pass (known: stable alpha-2025-11-25 alpha-2026-07-28)" ;;
        esac
    done
fi
stop_children 10

if ((${#failed[@]} == 0)); then
    say "Conformance: every scenario of every pass passed"
    exit 0
fi
warn "conformance failed in: ${failed[*]}; checks in conformance-results/<pass>/*/checks.json, server log in var/conformance/server.log"
exit 1
