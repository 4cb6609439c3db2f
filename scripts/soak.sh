#!/usr/bin/env bash
# `make soak`: every soak/*.py in turn (long fault and load runs that print their figures).
# They use their own PostgreSQL database (SOAK_DATABASE_URL, default toolbay_soak: pytest
# creates test_toolbay_soak) and Redis db 12 (SOAK_REDIS_URL), which they flush.
# Exits non-zero when any script failed, after running all of them.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

ensure_requirements dev
export TOOLBAY_TEST_DATABASE_URL="${SOAK_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/toolbay_soak}"
export TOOLBAY_TEST_REDIS_URL="${SOAK_REDIS_URL:-redis://127.0.0.1:6379/12}"
ensure_postgres "$TOOLBAY_TEST_DATABASE_URL"
ensure_redis "$TOOLBAY_TEST_REDIS_URL"

failed=()
for script in soak/*.py; do
    say "$script"
    start=$SECONDS
    if "$PY" "$script"; then
        say "$script passed in $((SECONDS - start)) s"
    else
        warn "$script FAILED after $((SECONDS - start)) s"
        failed+=("$script")
    fi
done
((${#failed[@]} == 0)) || die "soak scripts failed: ${failed[*]}"
