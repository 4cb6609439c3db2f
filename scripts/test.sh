#!/usr/bin/env bash
# `make test`: the whole suite, the one .ci/run calls.
#
# Set-up (stops at the first failure): dev requirements, PostgreSQL, Redis for the tests.
# Checks (all run; the summary lists each with its time): ruff (lint and format), the import
# contracts, mypy, makemigrations --check, pytest, the MCP conformance suite (server scenarios,
# and the authorization-server scenarios against the embedded OAuth server). Exits non-zero when any check failed.
#
# Knobs: TOOLBAY_TEST_DATABASE_URL, TOOLBAY_TEST_REDIS_URL (see tests/settings.py),
# PYTEST_ARGS (extra pytest arguments), SKIP_CONFORMANCE=1.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

TEST_DATABASE_URL="${TOOLBAY_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/toolbay}"
TEST_REDIS_URL="${TOOLBAY_TEST_REDIS_URL:-redis://127.0.0.1:6379/15}"

trap 'stop_children' EXIT
trap 'stop_children; exit 130' INT
trap 'stop_children; exit 143' TERM

STAGE_NAMES=()
STAGE_RESULTS=()
STAGE_SECONDS=()

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# stage NAME COMMAND... — runs a check, records its outcome and time, never aborts the run.
stage() {
    local name="$1" start status=0
    shift
    say "$name"
    start="$(now)"
    "$@" || status=$?
    STAGE_NAMES+=("$name")
    STAGE_SECONDS+=("$(elapsed "$start" "$(now)")")
    if ((status == 0)); then STAGE_RESULTS+=("ok"); else STAGE_RESULTS+=("FAILED ($status)"); fi
}

# setup NAME COMMAND... — like stage, but a failure ends the run (nothing after it can work).
setup() {
    stage "$@"
    [[ "${STAGE_RESULTS[-1]}" == ok ]] || { summary; exit 1; }
}

summary() {
    local i failed=0
    printf '\n%-48s %-12s %8s\n' "make test" "result" "seconds" >&2
    for i in "${!STAGE_NAMES[@]}"; do
        printf '%-48s %-12s %8s\n' "${STAGE_NAMES[$i]}" "${STAGE_RESULTS[$i]}" "${STAGE_SECONDS[$i]}" >&2
        [[ "${STAGE_RESULTS[$i]}" == ok ]] || failed=1
    done
    printf '%-48s %-12s %8s\n\n' "total" "$( ((failed)) && echo FAILED || echo ok)" "$(elapsed "$T0" "$(now)")" >&2
    return "$failed"
}

makemigrations_check() {
    # Default settings on a throw-away in-memory database: the check reads no one's data.
    DATABASE_URL="sqlite://:memory:" "$PY" manage.py makemigrations --check --dry-run
}

# The console's browser test (tests/audit/test_live_console.py) drives Debian's Chromium.
# Installed when missing and apt-get can run as root; otherwise that one test skips.
ensure_chromium() {
    command -v chromium >/dev/null && return 0
    if command -v apt-get >/dev/null && as_root true 2>/dev/null; then
        say "chromium is missing; installing it with apt-get (for the console's browser test)"
        if as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; then
            return 0
        fi
    fi
    warn "Chromium is not installed and could not be installed here (apt-get as root is needed):" \
        "the console's browser test will be skipped. Install it with: sudo apt-get install chromium"
}

T0="$(now)"
setup "install requirements-dev.txt (if changed)" ensure_requirements dev
setup "PostgreSQL for the tests" ensure_postgres "$TEST_DATABASE_URL"
setup "Redis for the tests" ensure_redis "$TEST_REDIS_URL"
stage "Chromium for the browser test (if missing)" ensure_chromium

stage "ruff check ." "$VENV/bin/ruff" check .
stage "ruff format --check ." "$VENV/bin/ruff" format --check .
stage "import contracts (lint-imports)" "$VENV/bin/lint-imports"
stage "mypy" "$VENV/bin/mypy" mcp_platform tools_app tenants audit api console oauth staff_auth
stage "makemigrations --check --dry-run" makemigrations_check
# shellcheck disable=SC2086 # PYTEST_ARGS is a list of words on purpose
stage "pytest" "$PY" -m pytest ${PYTEST_ARGS:-}
if [[ -z "${SKIP_CONFORMANCE:-}" ]]; then
    stage "conformance (make conformance)" bash "$ROOT/conformance/run.sh"
    stage "conformance, authorization server (make conformance-auth)" bash "$ROOT/conformance/auth.sh"
fi

summary
