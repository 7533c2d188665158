#!/usr/bin/env bash
# Run the tests at both ends of the supported range, each in a fresh virtual environment with the
# light `test` extra: Python 3.11 with the oldest supported JAX (the unit tests, doctests and
# strict nbval of the series), and Python 3.13 with the newest (those and the end-to-end tests;
# as root, the course cluster's too). The browser, site and nbgrader tests (markers browser and
# instructor) and the steps at another device count run in the main environment only (.ci/run).
#   bash scripts/test_jax_range.sh [--prepare|--installed] [OLDEST] [NEWEST]  (default: 0.10.0 0.12.1)
# --prepare only builds the environments, --installed only tests in them (CI builds them in the
# background while the suite runs); with neither it does both.
# RANGE_PYTHONS_NEWEST="3.12 3.13" also tries the newest JAX on Python 3.12 (default: 3.13);
# RANGE_PYTHONS_NEWEST=none leaves the newest end out (CI: its main environment is the newest end).
# Prints one PASSED/FAILED line per environment and exits non-zero if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {  # find_python 3.12 → a working python3.12, from pyenv's versions or PATH
    bash "$(dirname "$0")/find_python.sh" "$1"
}

mode=both
case "${1:-}" in
    --prepare) mode=prepare; shift ;;
    --installed) mode=installed; shift ;;
esac
ends=("3.11 ${1:-0.10.0}")
newest=${RANGE_PYTHONS_NEWEST:-3.13}
[ "$newest" = none ] && newest=""
for py in $newest; do
    ends+=("$py ${2:-0.12.1}")
done
status=0
summary=()
for end in "${ends[@]}"; do
    read -r py version <<<"$end"
    python=$(find_python "$py")
    if [ -z "$python" ]; then
        summary+=("Python $py with jax $version: FAILED (no python$py found; install it)")
        status=1
        continue
    fi
    venv="build/venv-py$py-jax-$version"
    if [ "$mode" != installed ]; then
        rm -rf "$venv"
        "$python" -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --upgrade pip
        "$venv/bin/python" -m pip install --quiet -e ".[test]" "jax==$version" "jaxlib==$version"
    fi
    if [ "$mode" = prepare ]; then
        summary+=("Python $py with jax $version: installed in $venv")
        continue
    fi
    echo "== Python $py, jax $("$venv/bin/python" -c 'import jax; print(jax.__version__)')"
    # the notebooks start `course` from the kernel's own environment: put it first on PATH
    # (course student without nbgrader says how to install it before it looks for --folder)
    # the oldest end: its notebooks too, not the end-to-end runs (the main environment and the
    # newest end run those)
    marks="not browser and not instructor"
    if [ "$version" = "${1:-0.10.0}" ] && [ "$py" = 3.11 ]; then
        marks="not e2e and $marks"
    fi
    if PATH="$PWD/$venv/bin:$PATH" "$venv/bin/python" -m pytest -q \
        -m "$marks" \
        --deselect "tests/test_notebooks.py::test_the_series_runs_green_with_other_device_counts" \
        --deselect "tests/test_bad_input.py::test_commands_outside_the_course_folder_say_where_to_run[argv1---folder]"
    then
        summary+=("Python $py with jax $version: PASSED")
    else
        summary+=("Python $py with jax $version: FAILED")
        status=1
    fi
done
printf '%s\n' "${summary[@]}"
exit $status
