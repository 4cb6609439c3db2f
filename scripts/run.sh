#!/usr/bin/env bash
# `make run`: install what is missing, migrate, seed the demo, make sure Redis answers, then
# serve Toolbay (uvicorn) and run a Celery worker in the foreground. One Ctrl-C stops all.
#
# Knobs (environment): HOST (127.0.0.1), PORT (8000), CELERY_CONCURRENCY (2), PYTHON, and
# every setting in README.md (DATABASE_URL, REDIS_URL, ...).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-8000}"
CELERY_CONCURRENCY="${CELERY_CONCURRENCY:-2}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"

# shellcheck disable=SC2329 # called from the traps below
shutdown() {
    # Ignore further stop signals rather than restore their default: a second one (Ctrl-C
    # pressed again, a supervisor repeating SIGTERM) must not kill this script halfway
    # through stopping its children.
    trap '' INT TERM HUP
    trap - EXIT
    stop_children
}
trap 'shutdown; exit 130' INT
trap 'shutdown; exit 143' TERM
trap 'shutdown; exit 129' HUP
trap shutdown EXIT

ensure_requirements runtime
probe port-free "$HOST" "$PORT" || die "something already listens on $HOST:$PORT." \
    "Stop it, or serve on another port: make run PORT=8001"
ensure_redis "$REDIS_URL"
if [[ "${CELERY_BROKER_URL:-}" == redis://* && "$CELERY_BROKER_URL" != "$REDIS_URL" ]]; then
    ensure_redis "$CELERY_BROKER_URL"
fi

if [[ -n "${DATABASE_URL:-}" ]]; then
    say "Applying migrations to the database in DATABASE_URL"
else
    say "Applying migrations to the SQLite file db.sqlite3"
fi
"$PY" manage.py migrate --noinput
say "Seeding the demo tenant and its tools (safe to repeat)"
"$PY" manage.py seed_demo
# The demo tenant takes OAuth access tokens from the embedded authorization server too, so MCP
# clients that sign in (rather than send a key) connect out of the box.
"$PY" manage.py oauth_enable demo

say "Starting uvicorn on $HOST:$PORT, a Celery worker, the audit writer, the upstream listener and the packaged-server runner"
# X-Forwarded-* only from TOOLBAY_TRUSTED_PROXIES (uvicorn would trust 127.0.0.1 by default,
# letting any local client turn the advertised issuer into https://).
start_child uvicorn - "$VENV/bin/uvicorn" mcp_platform.asgi:application --host "$HOST" --port "$PORT" \
    --loop uvloop --http httptools --forwarded-allow-ips "${TOOLBAY_TRUSTED_PROXIES:-}" --timeout-graceful-shutdown 5
web_pid="$CHILD_PID"
# Both queues (calls longer than TOOLBAY_LONG_CALL_SECONDS go to toolbay.long) and the
# embedded beat for the periodic clean-ups; a deployment runs one beat of its own instead.
# The only worker here: no neighbours to sync with at start (mingle waits 1 s to learn that).
mkdir -p "$VAR"
start_child "celery worker" - "$VENV/bin/celery" -A mcp_platform worker --loglevel INFO \
    --queues toolbay.short,toolbay.long --concurrency "$CELERY_CONCURRENCY" --without-mingle \
    --beat --schedule "$VAR/celerybeat-schedule"
# Writes the invocation rows the call path appends to the Redis audit journal into the database.
start_child "audit writer" - "$PY" manage.py audit_writer
# Re-imports tools of upstream MCP servers when they announce a change (tools/list_changed).
start_child "upstream listener" - "$PY" manage.py listen_upstreams
# Runs packaged (npm/PyPI) MCP servers' instances, sandboxed, started on first use.
start_child "packaged runner" - "$PY" manage.py run_packaged

url_host="$HOST"
[[ "$url_host" == 0.0.0.0 || "$url_host" == "::" ]] && url_host=127.0.0.1
[[ "$url_host" == *:* ]] && url_host="[$url_host]"
base="http://$url_host:$PORT"
deadline=$((SECONDS + 60))
until probe http "$base/healthz"; do
    child_alive "$web_pid" || die "uvicorn exited during start-up (its output is above)."
    ((SECONDS < deadline)) || die "uvicorn did not answer $base/healthz within 60 s."
    sleep 0.3
done

cat >&2 <<EOF

  Toolbay is running.
    Admin  $base/admin/
           user "admin"; seed_demo printed its password above when it created it
           (or set one: TOOLBAY_ADMIN_PASSWORD=... make run)
    MCP    $base/mcp/demo          Authorization: Bearer <key>, or sign in with OAuth (as admin)
           create a key: .venv/bin/python manage.py create_api_key demo --name laptop
           authorized clients: $base/oauth/authorizations/
  Press Ctrl-C to stop the server, the worker and any Redis started here.

EOF

# Whichever child ends first (a crash, a port taken) ends the whole run.
status=0
wait -n || status=$?
for i in "${!CHILD_PIDS[@]}"; do
    if ! child_alive "${CHILD_PIDS[$i]}"; then
        warn "${CHILD_NAMES[$i]} exited (status $status); stopping the rest."
    fi
done
exit $((status == 0 ? 1 : status))
