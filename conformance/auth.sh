#!/usr/bin/env bash
# `make conformance-auth`: the official conformance suite's authorization-server scenarios
# (@modelcontextprotocol/conformance@0.2.0-alpha.12, `conformance authorization`: metadata
# endpoint, authorization code grant) against Toolbay's embedded authorization server.
#
# A throw-away server (SQLite under var/conformance-auth/, its own Redis db, flushed) with
# the demo tenant, OAuth on, and a client pre-registered for the suite's callback. The suite
# prints an authorization URL and waits for a browser; conformance/auth_user.py plays the
# person at it (signs in as admin, approves the consent page, follows the redirect).
#
# Knobs: TOOLBAY_CONFORMANCE_REDIS_URL (redis://127.0.0.1:6379/14), CONFORMANCE_TIMEOUT (300 s).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$ROOT"

# shellcheck source=conformance/suite.sh
source "$ROOT/conformance/suite.sh"
REDIS_URL_CONF="${TOOLBAY_CONFORMANCE_REDIS_URL:-redis://127.0.0.1:6379/14}"
WORK="$VAR/conformance-auth"
RESULTS="$ROOT/conformance-results/authorization"

trap 'stop_children 10' EXIT
trap 'stop_children 10; exit 130' INT
trap 'stop_children 10; exit 143' TERM

ensure_suite
ensure_requirements runtime
ensure_redis "$REDIS_URL_CONF"
probe redis-flush "$REDIS_URL_CONF"
rm -rf "$WORK" "$RESULTS"
mkdir -p "$WORK" "$RESULTS"

password="conformance-$RANDOM$RANDOM$RANDOM"
server_env=(
    DJANGO_SETTINGS_MODULE=mcp_platform.settings
    DEBUG=0
    SECRET_KEY="conformance-auth-$(date +%s)-$RANDOM$RANDOM"
    TOOLBAY_SECRET_KEYS="$("$PY" -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')"
    "ALLOWED_HOSTS=localhost,127.0.0.1"
    TOOLBAY_PUBLIC_URL=
    DATABASE_URL="sqlite:///$WORK/db.sqlite3"
    REDIS_URL="$REDIS_URL_CONF"
    CELERY_BROKER_URL="$REDIS_URL_CONF"
    CHANNEL_LAYER_PREFIX=toolbay-conformance-auth:asgi
    TOOLBAY_ADMIN_PASSWORD="$password"
)

port="$(probe free-port)"
callback_port="$(probe free-port)"
say "Preparing the server's database: migrate, seed_demo, OAuth on for demo, a client for the suite"
{
    env "${server_env[@]}" "$PY" manage.py migrate --noinput &&
        env "${server_env[@]}" "$PY" manage.py seed_demo &&
        env "${server_env[@]}" "$PY" manage.py oauth_enable demo
} >"$WORK/setup.log" 2>&1 || { cat "$WORK/setup.log" >&2; die "could not prepare the database (output above)."; }
client_id="$(env "${server_env[@]}" "$PY" manage.py oauth_client demo --name "MCP conformance suite" \
    --redirect-uri "http://127.0.0.1:$callback_port/callback" 2>>"$WORK/setup.log" | tail -n 1)"

start_child "conformance-auth server" "$WORK/server.log" env "${server_env[@]}" "$VENV/bin/uvicorn" \
    mcp_platform.asgi:application --host 127.0.0.1 --port "$port" --log-level warning --no-access-log \
    --forwarded-allow-ips "${TOOLBAY_TRUSTED_PROXIES:-}"
server_pid="$CHILD_PID"
deadline=$((SECONDS + 60))
until probe http "http://127.0.0.1:$port/healthz"; do
    if ! child_alive "$server_pid" || ((SECONDS >= deadline)); then
        tail -n 40 "$WORK/server.log" >&2
        die "the server did not come up (log above)."
    fi
    sleep 0.2
done

issuer="http://localhost:$port/oauth/demo"
suite=("$NODE" "$CONF_ALPHA" authorization --url "$issuer" --client-id "$client_id"
    --resource "http://localhost:$port/mcp/demo" --port "$callback_port" -o "$RESULTS")
command -v timeout >/dev/null && suite=(timeout "${CONFORMANCE_TIMEOUT:-300}" "${suite[@]}")
say "Running the authorization-server scenarios of the conformance suite $ALPHA_VERSION against $issuer"
status=0
set +o pipefail
"${suite[@]}" 2>&1 | "$PY" "$ROOT/conformance/auth_user.py" admin "$password"
statuses=("${PIPESTATUS[@]}")
set -o pipefail
((statuses[0] == 0)) || status="${statuses[0]}"
((statuses[1] == 0)) || status=1
stop_children 10

if ((status == 0)); then
    say "Authorization-server conformance: every check passed (results in conformance-results/authorization/)"
else
    warn "authorization-server conformance failed ($status); server log in var/conformance-auth/server.log"
fi
exit "$status"
