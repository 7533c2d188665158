#!/usr/bin/env bash
# Every per-notebook path on every step; the end-to-end tests (pytest -m e2e) run each on the few
# steps that cover its kinds of cell (tests/sample.py). CI runs this once:
#   - the series at 1, 2, 3 and 6 devices (scripts/test_device_counts.sh) and at 8 (the
#     end-to-end test, which also checks what 01 and 04 print),
#   - the student edition of every notebook run up to its first exercise,
#   - the nbgrader release of every exercise notebook,
#   - check-submission of every exercise notebook with its reference solutions put back,
#   - with --browser (before a release; not in CI): every step in JupyterLab and the site of
#     every step, in headless Chromium.
#   bash scripts/test_all_notebooks.sh [--browser]
# Prints one PASSED/FAILED line per part and exits non-zero if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
    "") browser=() ;;
    --browser) browser=(tests/test_browser.py tests/test_book.py) ;;
    *) echo "usage: bash scripts/test_all_notebooks.sh [--browser]" >&2; exit 2 ;;
esac
status=0
summary=()
if bash scripts/test_device_counts.sh 1 2 3 6; then
    summary+=("the series at 1, 2, 3 and 6 devices: PASSED")
else
    summary+=("the series at 1, 2, 3 and 6 devices: FAILED (see build/devices-*.log)")
    status=1
fi
if COURSE_ALL_NOTEBOOKS=1 python -m pytest -q -m e2e \
    "tests/test_notebooks.py::test_the_series_runs_green_with_other_device_counts" \
    "tests/test_student.py::test_student_notebook_stops_at_its_first_exercise" \
    "tests/test_nbgrader.py" \
    "tests/test_submission.py::test_reference_solutions_put_back_pass" \
    "${browser[@]}"; then
    summary+=("8 devices, student editions, nbgrader, check-submission${browser:+, browser, site}: PASSED")
else
    summary+=("8 devices, student editions, nbgrader, check-submission${browser:+, browser, site}: FAILED")
    status=1
fi
printf '%s\n' "${summary[@]}"
exit $status
