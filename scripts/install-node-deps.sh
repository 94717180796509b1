#!/usr/bin/env bash
# Installs the npm packages the interop tests drive (MCP reference server, AG-UI client) into
# tests/node/node_modules. Skips quietly when Node.js is missing, unless CI=true (then it fails:
# CI must run the interop tests). Idempotent: does nothing when the lock's packages are present.
set -euo pipefail
cd "$(dirname "$0")/../tests/node"
if ! command -v npm >/dev/null 2>&1; then
    if [ "${CI:-}" = "true" ]; then
        echo "install-node-deps: npm is missing; CI needs Node.js for the interop tests" >&2
        exit 1
    fi
    echo "install-node-deps: npm not found; the interop tests that need Node.js will be skipped" >&2
    exit 0
fi
stamp=node_modules/.agentrt-installed
if [ -f "$stamp" ] && [ "$stamp" -nt package.json ]; then
    exit 0
fi
npm install --no-audit --no-fund --loglevel=error
touch "$stamp"
