#!/usr/bin/env bash
# The project's test command: installs the optional tools some tests use (when run as
# root on Debian and they are missing), then runs every test of the workspace in release
# mode (the engine's timing-sensitive paths are meaningless in debug builds).
#
# Tests that need a tool or root check for it and print why they skip.
set -euo pipefail
cd "$(dirname "$0")/.."

want=()
command -v valgrind >/dev/null || want+=(valgrind)
command -v perf >/dev/null || want+=(linux-perf)
command -v fio >/dev/null || want+=(fio)
command -v losetup >/dev/null || want+=(mount)
command -v mkfs.ext4 >/dev/null || want+=(e2fsprogs)
command -v chromium >/dev/null || want+=(chromium)
# emulate mount's program tests and scripts/bench-emulate.sh (seed 004's runs).
command -v postmark >/dev/null || want+=(postmark)
command -v hdparm >/dev/null || want+=(hdparm)
command -v bc >/dev/null || want+=(bc)
# emulate vm's guest (crates/cli/tests/vm.rs): User-Mode Linux.
command -v linux.uml >/dev/null || want+=(user-mode-linux)
command -v insmod >/dev/null || want+=(kmod)
if [ ${#want[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "scripts/test.sh: installing ${want[*]} (used by tests that otherwise skip)"
        apt-get update -qq >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}" >/dev/null 2>&1 \
            || echo "scripts/test.sh: could not install ${want[*]}; the tests that need them will skip"
    else
        echo "scripts/test.sh: ${want[*]} missing and not root; the tests that need them will skip"
    fi
fi

# The habits that keep the tree readable gate the tests: formatting, then clippy with
# warnings as errors over every target (tests, benches, examples included).
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null; then
        rustup component add rustfmt clippy >/dev/null 2>&1 || true
    fi
fi
echo "scripts/test.sh: cargo fmt --check"
cargo fmt --all -- --check
echo "scripts/test.sh: cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --release -- -D warnings

cargo test --workspace --release "$@"
