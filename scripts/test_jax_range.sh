#!/usr/bin/env bash
# Run the tests (unit tests, doctests, strict nbval, the series on 8 devices; not the browser
# tests) at both ends of the supported range, each in a fresh virtual environment:
#   Python 3.11 with the oldest supported JAX, and Python 3.12 and 3.13 with the newest.
#   bash scripts/test_jax_range.sh [OLDEST] [NEWEST]      (default: 0.9.0 0.12.0.1)
# Prints one PASSED/FAILED line per environment and exits non-zero if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {  # find_python 3.12 → a working python3.12, from pyenv's versions or PATH
    for candidate in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$1".*/bin/python 2>/dev/null) \
                     "$(command -v "python$1" 2>/dev/null)"; do
        if [ -n "$candidate" ] && "$candidate" --version >/dev/null 2>&1; then
            echo "$candidate"
            return
        fi
    done
}

status=0
summary=()
for end in "3.11 ${1:-0.9.0}" "3.12 ${2:-0.12.0.1}" "3.13 ${2:-0.12.0.1}"; do
    read -r py version <<<"$end"
    python=$(find_python "$py")
    if [ -z "$python" ]; then
        summary+=("Python $py with jax $version: FAILED (no python$py found; install it)")
        status=1
        continue
    fi
    venv="build/venv-py$py-jax-$version"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet -e ".[dev]" "jax==$version" "jaxlib==$version"
    echo "== Python $py, jax $("$venv/bin/python" -c 'import jax; print(jax.__version__)')"
    # the notebooks start `course` from the kernel's own environment: put it first on PATH
    if PATH="$PWD/$venv/bin:$PATH" "$venv/bin/python" -m pytest -q -m "not browser"; then
        summary+=("Python $py with jax $version: PASSED")
    else
        summary+=("Python $py with jax $version: FAILED")
        status=1
    fi
done
printf '%s\n' "${summary[@]}"
exit $status
