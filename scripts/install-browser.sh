#!/usr/bin/env bash
# Install Debian's chromium for the headless browser tests of the web UI (tests/browser).
# Idempotent and quiet: does nothing when /usr/bin/chromium already exists. Never downloads a
# browser build of its own (Playwright drives this system chromium through executable_path).
# Needs root (CI runs as root on Debian); elsewhere it says what to do and exits non-zero.
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-browser: apt-get not found; install chromium by hand (the browser tests look for $CHROMIUM)" >&2
    exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo -n"
    else
        echo "install-browser: not root and no sudo; run: apt-get install -y chromium" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends chromium; } >"$log" 2>&1; then
    echo "install-browser: installing chromium failed:" >&2
    tail -n 20 "$log" >&2
    exit 1
fi

if [ ! -x "$CHROMIUM" ]; then
    echo "install-browser: chromium installed but $CHROMIUM is missing" >&2
    exit 1
fi
echo "install-browser: installed $("$CHROMIUM" --version 2>/dev/null || echo chromium)"
