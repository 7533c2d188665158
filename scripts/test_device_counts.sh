#!/usr/bin/env bash
# Run the series headless with other device counts (strict nbval checks the stored 4-device run;
# the suite runs a few steps at 8): every run must pass.
#   bash scripts/test_device_counts.sh [COUNT ...]            every step at each count (default: 1 2 3 6)
#   bash scripts/test_device_counts.sh --rotate [COUNT ...]   each step once, step k at the
#       (k - 1) mod n-th count (default: 1 2 3 6 8): every count, in one run of the series (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
rotate=false
if [ "${1:-}" = "--rotate" ]; then
    rotate=true
    shift
fi
if $rotate; then
    read -r -a counts <<<"${*:-1 2 3 6 8}"
else
    read -r -a counts <<<"${*:-1 2 3 6}"
fi
status=0
mkdir -p build
for i in "${!counts[@]}"; do
    count=${counts[$i]}
    notebooks=()
    if $rotate; then
        for path in notebooks/[0-9][0-9]_*.ipynb; do
            step=$((10#$(basename "$path" | cut -c1-2)))
            if [ $(( (step - 1) % ${#counts[@]} )) -eq "$i" ]; then
                notebooks+=("$path")
            fi
        done
    fi
    what="$count devices${notebooks:+ (${#notebooks[@]} steps)}"
    if course run "${notebooks[@]}" --devices "$count" --out "build/devices-$count" \
        >"build/devices-$count.log" 2>&1; then
        echo "$what: PASSED"
    else
        echo "$what: FAILED (see build/devices-$count.log)"
        status=1
    fi
done
exit $status
