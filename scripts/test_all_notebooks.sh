#!/usr/bin/env bash
# Every per-notebook path on every step; the end-to-end tests (pytest -m e2e) run each on the few
# steps that cover its kinds of cell (tests/sample.py). CI runs this once:
#   - every step at another device count, each count on some steps (scripts/test_device_counts.sh
#     --rotate: step k at the (k - 1) mod 5-th of 1, 2, 3, 6 and 8 devices),
#   - the student edition of every notebook run up to its first exercise,
#   - the nbgrader release of every exercise notebook,
#   - check-submission of every exercise notebook with its reference solutions put back;
#   - with --release (before a release; not in CI): every step at each of 1, 2, 3, 6 and 8 devices
#     (8 also checks what 01 and 04 print), every step in JupyterLab and the site of every step,
#     in headless Chromium.
#   bash scripts/test_all_notebooks.sh [--release]
# Prints one PASSED/FAILED line per part and exits non-zero if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
    "") release=false; extra=() ;;
    --release) release=true
        extra=("tests/test_notebooks.py::test_the_series_runs_green_with_other_device_counts"
               tests/test_browser.py tests/test_book.py) ;;
    *) echo "usage: bash scripts/test_all_notebooks.sh [--release]" >&2; exit 2 ;;
esac
status=0
summary=()
if $release; then
    counts=(bash scripts/test_device_counts.sh 1 2 3 6)
    said="every step at 1, 2, 3 and 6 devices"
else
    counts=(bash scripts/test_device_counts.sh --rotate 1 2 3 6 8)
    said="each step at one of 1, 2, 3, 6 and 8 devices"
fi
if "${counts[@]}"; then
    summary+=("$said: PASSED")
else
    summary+=("$said: FAILED (see build/devices-*.log)")
    status=1
fi
if COURSE_ALL_NOTEBOOKS=1 python -m pytest -q -m e2e \
    "tests/test_student.py::test_student_notebook_stops_at_its_first_exercise" \
    "tests/test_nbgrader.py" \
    "tests/test_submission.py::test_reference_solutions_put_back_pass" \
    "${extra[@]}"; then
    summary+=("student editions, nbgrader, check-submission${extra:+, 8 devices, browser, site}: PASSED")
else
    summary+=("student editions, nbgrader, check-submission${extra:+, 8 devices, browser, site}: FAILED")
    status=1
fi
printf '%s\n' "${summary[@]}"
exit $status
