#!/usr/bin/env bash
# Run the tests (unit tests, doctests, strict nbval; not the browser test) on both ends of the
# supported JAX range stated in pyproject.toml, each in a fresh virtual environment.
#   bash scripts/test_jax_range.sh [LOWEST] [HIGHEST]      (default: 0.9.0 0.10.2)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=$(command -v python3.11 || command -v python3)
status=0
for version in "${1:-0.9.0}" "${2:-0.10.2}"; do
    venv="build/venv-jax-$version"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet -e ".[dev]" "jax==$version" "jaxlib==$version"
    echo "== jax $("$venv/bin/python" -c 'import jax; print(jax.__version__)')"
    if ! "$venv/bin/python" -m pytest -q -m "not browser"; then
        status=1
    fi
done
exit $status
