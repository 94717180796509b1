#!/usr/bin/env bash
# Install Debian's bubblewrap (bwrap) for ShellTool(sandbox="bwrap") and its tests
# (tests/security/test_sandbox*.py). Idempotent and quiet: does nothing when bwrap is already on
# PATH. Then probes that bwrap can really create its namespaces here (containers may forbid them)
# and says why not when it cannot. Needs root (CI runs as root on Debian); elsewhere it says what to
# do and exits non-zero.
set -euo pipefail

probe() {
    # The namespaces and flags ShellTool(sandbox="bwrap") uses (agentrt/tool/builtin/sandbox.py): new
    # user, mount, PID, network, IPC, UTS and cgroup namespaces, no capabilities, no nested user
    # namespaces (bwrap >= 0.8), the system read-only, a fresh /proc, /dev and /tmp.
    "$1" --unshare-all --unshare-user --disable-userns --cap-drop ALL --die-with-parent --new-session \
        --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp -- /bin/true
}

report_probe() {
    local bwrap=$1 out
    if out=$(probe "$bwrap" 2>&1); then
        return 0
    fi
    echo "install-sandbox: $bwrap is installed but cannot create namespaces here: ${out:-no output}" >&2
    echo "install-sandbox: user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone," \
        "user.max_user_namespaces) or forbidden by the container (run it with --privileged or a seccomp" \
        "profile that allows unshare/clone with namespace flags)" >&2
    return 1
}

if BWRAP=$(command -v bwrap); then
    report_probe "$BWRAP"
    exit $?
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-sandbox: apt-get not found; install bubblewrap by hand (ShellTool looks for bwrap on PATH)" >&2
    exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo -n"
    else
        echo "install-sandbox: not root and no sudo; run: apt-get install -y bubblewrap" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Install without a fresh index first when the cached one already knows the package (offline CI
# images); update and retry otherwise.
if ! { $SUDO apt-get install -y -qq --no-install-recommends bubblewrap \
    || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends bubblewrap; }; } >"$log" 2>&1; then
    echo "install-sandbox: installing bubblewrap failed:" >&2
    tail -n 20 "$log" >&2
    exit 1
fi

if ! BWRAP=$(command -v bwrap); then
    echo "install-sandbox: bubblewrap installed but bwrap is not on PATH" >&2
    exit 1
fi
report_probe "$BWRAP"
echo "install-sandbox: installed $("$BWRAP" --version 2>/dev/null || echo bwrap)"
