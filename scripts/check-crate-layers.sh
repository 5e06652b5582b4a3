#!/usr/bin/env bash
# Checks the workspace's crate layers (issue 21): the crates at the bottom do not reach the
# ones above them, whether directly or through another crate, counting build and dev
# dependencies too (a test that needs the device model belongs to a crate above both).
#
#   smartcon-util    the shared vocabulary (Op, units, the one error type): no smartcon crate
#   smartcon-devemu  the device models: not the engine, nor anything above it
#   smartcon-engine  ports, waits, decisions: not its device emulator (devemu), nor
#                    smartcon-emutarget, where the emulated target and the simulation live
#
# Read from `cargo tree` (Cargo.lock's resolution). Usage: scripts/check-crate-layers.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# crate -> the smartcon crates it must not reach (a regular expression; "smartcon-.*" = any).
declare -A FORBIDDEN=(
    [smartcon-util]='smartcon-.*'
    [smartcon-devemu]='smartcon-(engine|emutarget|workloads|emulate|preload|study|report|cli)'
    [smartcon-engine]='smartcon-(devemu|emutarget|workloads|emulate|preload|study|report|cli)'
)

fail=0
for crate in "${!FORBIDDEN[@]}"; do
    # Every package the crate reaches, itself left out.
    reached=$(cargo tree -q -p "$crate" -e normal,build,dev --prefix none --format '{p}' \
        | awk '{print $1}' | sort -u | grep -vx "$crate" || true)
    bad=$(grep -Ex "${FORBIDDEN[$crate]}" <<<"$reached" || true)
    if [ -n "$bad" ]; then
        echo "check-crate-layers: $crate depends on $(tr '\n' ' ' <<<"$bad")(not allowed: see $0)"
        # The path to each, for the fix.
        for b in $bad; do
            cargo tree -q -p "$crate" -e normal,build,dev -i "$b" --prefix indent | sed 's/^/  /'
        done
        fail=1
    fi
done
if [ "$fail" = 0 ]; then
    echo "check-crate-layers: util, devemu and the engine reach no crate above them (the engine no devemu)"
fi
exit "$fail"
