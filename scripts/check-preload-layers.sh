#!/usr/bin/env bash
# Checks that crates/preload's modules form layers without a circle (issue 21):
#
#   interposition (3) -> per-descriptor routing (2) -> device and clock services (1) -> base (0)
#
# Each module's references to others (`crate::NAME`, `crate::{A, B}`, `super::NAME` inside
# vclock/) are read from its source, comments left out. The check fails when a module reaches
# a module of a higher layer, when the references within a layer make a circle (tsort), or
# when a module is missing from the table below (a new file must say where it stands).
#
# Usage: scripts/check-preload-layers.sh [--edges]   (--edges prints the graph and exits 0)
set -euo pipefail
cd "$(dirname "$0")/../crates/preload/src"

declare -A RANK=(
    # interposition: the interposed calls, the C ABI, what runs at load
    [shim]=3 [aio]=3 [waits]=3 [vtimer]=3 [vclock::interpose]=3 [clone]=3 [capi]=3 [lifecycle]=3
    # per-descriptor routing
    [fdtable]=2 [process]=2
    # device and clock services
    [emu]=1 [port]=1 [devices]=1 [vclock::domain]=1 [vclock::ownclock]=1 [vclock::sleep]=1 [vclock]=1
    # base
    [real]=0 [guard]=0 [helper]=0 [config]=0 [bypass]=0 [record]=0 [fpset]=0
)
LAYER=(base services routing interposition)

# The module a source file is.
module_of() {
    local f=${1%.rs}
    f=${f%/mod}
    echo "${f//\//::}"
}

edges() {
    local file mod dir
    while IFS= read -r file; do
        mod=$(module_of "$file")
        [ "$mod" = lib ] && continue
        dir=$(dirname "$file")
        # Code only: line comments (//, ///, //!) removed.
        sed -E 's@^[[:space:]]*//.*$@@; s@[[:space:]]//[^"]*$@@' "$file" | {
            grep -oE 'crate::\{[^}]*\}|crate::[a-z_]+::\{[^}]*\}|crate::[a-z_]+(::[a-z_]+)?|super::[a-z_]+' || true
        } | while IFS= read -r ref; do
            case $ref in
                crate::[a-z_]*::\{*)
                    # crate::DIR::{a, b}: the submodules of a directory module.
                    top=${ref#crate::}
                    top=${top%%::*}
                    inner=${ref#*\{}
                    inner=${inner%\}}
                    tr ',' '\n' <<<"$inner" | sed -E 's/^[[:space:]]*//; s/[[:space:]].*$//; s/::.*$//' | grep -E '^[a-z_]+$' \
                        | while IFS= read -r sub; do
                            if [ -f "$top/$sub.rs" ]; then echo "$top::$sub"; else echo "$top"; fi
                        done || true
                    ;;
                crate::\{*)
                    ref=${ref#crate::\{}
                    ref=${ref%\}}
                    tr ',' '\n' <<<"$ref" | sed -E 's/^[[:space:]]*//; s/[[:space:]].*$//; s/::.*$//' | grep -E '^[a-z_]+$' || true
                    ;;
                super::*)
                    [ "$dir" != . ] && echo "${dir//\//::}::${ref#super::}"
                    ;;
                *)
                    ref=${ref#crate::}
                    top=${ref%%::*}
                    if [ -d "$top" ] && [ -f "$top/${ref#*::}.rs" ]; then echo "$ref"; else echo "$top"; fi
                    ;;
            esac
        done | sort -u | while IFS= read -r to; do
            [ "$to" != "$mod" ] && echo "$mod $to"
        done
    done < <(find . -name '*.rs' | sed 's@^\./@@' | sort)
}

graph=$(edges)
if [ "${1:-}" = --edges ]; then
    echo "$graph"
    exit 0
fi

fail=0
while IFS= read -r file; do
    mod=$(module_of "$file")
    [ "$mod" = lib ] && continue
    if [ -z "${RANK[$mod]+x}" ]; then
        echo "check-preload-layers: $mod (src/$file) is in no layer: add it to the table in $0"
        fail=1
    fi
done < <(find . -name '*.rs' | sed 's@^\./@@' | sort)

while read -r from to; do
    [ -z "$from" ] && continue
    if [ -z "${RANK[$to]+x}" ]; then
        # Not a module of this crate (a macro or a crate-level item): nothing to order.
        continue
    fi
    if [ -n "${RANK[$from]+x}" ] && [ "${RANK[$from]}" -lt "${RANK[$to]}" ]; then
        echo "check-preload-layers: $from (${LAYER[${RANK[$from]}]}) reaches up to $to (${LAYER[${RANK[$to]}]})"
        fail=1
    fi
done <<<"$graph"

if ! loop=$(tsort <<<"$graph" 2>&1 >/dev/null) || [ -n "$loop" ]; then
    echo "check-preload-layers: the modules import one another in a circle:"
    echo "$loop" | sed 's/^/  /'
    fail=1
fi

if [ "$fail" = 0 ]; then
    echo "check-preload-layers: $(wc -l <<<"$graph") references among $(find . -name '*.rs' | wc -l) files, all downwards, no circle"
fi
exit "$fail"
