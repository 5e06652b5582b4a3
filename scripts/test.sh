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
# libaio's header and library: the libaio contract (crates/preload/c/contract_aio.c).
[ -e /usr/include/libaio.h ] || want+=(libaio-dev)
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

# Ray, for the distributed sweeps' and fleet's tests (crates/cli/tests/ray.rs): into a
# virtual environment inside the repository (.venv-ray, git-ignored), once. The tests skip,
# saying why, when this fails (no python3 venv, no network).
if ! .venv-ray/bin/python -c "import ray" >/dev/null 2>&1; then
    if ! python3 -c "import ensurepip, venv" >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null 2>&1 || true
    fi
    echo "scripts/test.sh: installing ray into .venv-ray (python/pyproject.toml's dependency)"
    { rm -rf .venv-ray && python3 -m venv .venv-ray && .venv-ray/bin/pip install -q "ray[default]>=2.9"; } >/dev/null 2>&1 \
        || echo "scripts/test.sh: could not install ray; the Ray tests will skip"
fi

# The habits that keep the tree readable gate the tests: formatting, then clippy with
# warnings as errors over every target (tests, benches, examples included).
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null; then
        rustup component add rustfmt clippy >/dev/null 2>&1 || true
    fi
fi
echo "scripts/test.sh: the preload library's layers (no module reaches up, no circle)"
bash scripts/check-preload-layers.sh
echo "scripts/test.sh: the crates' layers (the engine does not depend on its device emulator)"
bash scripts/check-crate-layers.sh
echo "scripts/test.sh: every citation of the papers names a section, figure or table its paper has"
if [ -d ../shared/seeds ] && command -v python3 >/dev/null; then
    python3 scripts/citations.py --check >/dev/null
else
    echo "scripts/test.sh: citations not checked: no ../shared/seeds (the papers) or no python3"
fi
echo "scripts/test.sh: cargo fmt --check"
cargo fmt --all -- --check
echo "scripts/test.sh: cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --release -- -D warnings

# Tests write only into temporary directories (issue 21): anything new in the source tree
# after the run, ignored or not, is a test writing where it should not (fio's verify state
# files were once committed from crates/cli that way).
# (Untracked and ignored names only: a tracked file edited meanwhile is not a test's doing.)
# Outside a git checkout both lists are empty and nothing is checked.
tree_files() {
    { git status --porcelain --ignored --untracked-files=normal 2>/dev/null || true; } \
        | { grep -E '^(\?\?|!!) ' || true; } | sort
}
tree_before=$(tree_files)
# Nor anything in the temporary directory (issue 21): the tests run with TMPDIR set to a
# fresh directory, and whatever is in it afterwards is named and fails the run.
test_tmp=$(mktemp -d "${TMPDIR:-/tmp}/smartcon-test.XXXXXX")
TMPDIR=$test_tmp cargo test --workspace --release "$@"
if [ -n "$(ls -A "$test_tmp")" ]; then
    echo "scripts/test.sh: the tests left these in TMPDIR ($test_tmp); remove them when a test ends, also on panic (tempfile):"
    ls -A "$test_tmp"
    exit 1
fi
rmdir "$test_tmp"
tree_new=$(comm -13 <(echo "$tree_before") <(tree_files))
if [ -n "$tree_new" ]; then
    echo "scripts/test.sh: the tests left files in the source tree (write them under a temporary directory):"
    echo "$tree_new"
    exit 1
fi
