#!/usr/bin/env bash
# `make deploy-check`: the checks of deploy/ that need no database, Redis or container daemon
# (tests/deploy, marker deploy_check): the Helm chart linted, rendered for several value sets
# and validated against Kubernetes' schemas, its invariants; hadolint on the Dockerfile; the
# compose file against the Compose specification; `nginx -t` on nginx.conf. Seconds.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
ensure_requirements dev
ensure_deploy_tools
exec "$PY" -m pytest tests/deploy -m deploy_check -q
