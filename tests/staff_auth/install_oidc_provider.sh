#!/usr/bin/env bash
# Installs the OpenID Connect provider the staff SSO tests sign in at (panva's oidc-provider,
# the 9.x line, which runs on Node 20.19+) into .conf/oidc-provider/, once; later runs reuse it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PREFIX="$ROOT/.conf/oidc-provider"
VERSION="9.13.3"
if [ -f "$PREFIX/node_modules/oidc-provider/package.json" ] &&
    grep -q "\"version\": \"$VERSION\"" "$PREFIX/node_modules/oidc-provider/package.json"; then
    exit 0
fi
command -v npm >/dev/null || { echo "npm is not installed" >&2; exit 1; }
mkdir -p "$PREFIX"
npm install --prefix "$PREFIX" --save-exact --no-audit --no-fund --loglevel=error "oidc-provider@$VERSION"
