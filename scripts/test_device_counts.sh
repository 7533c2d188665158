#!/usr/bin/env bash
# Run the whole series headless with other device counts (strict nbval checks the stored 4-device
# run; the suite runs a few steps at 8): every count must pass. scripts/test_all_notebooks.sh
# runs it with 1, 2, 3 and 6 (CI).
#   bash scripts/test_device_counts.sh [COUNT ...]      (default: 1 2 3 6)
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for n in "${@:-1 2 3 6}"; do
    for count in $n; do
        mkdir -p build
        if course run --devices "$count" --out "build/devices-$count" >"build/devices-$count.log" 2>&1; then
            echo "$count devices: PASSED"
        else
            echo "$count devices: FAILED (see build/devices-$count.log)"
            status=1
        fi
    done
done
exit $status
