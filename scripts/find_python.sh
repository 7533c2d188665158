#!/usr/bin/env bash
# Print a working pythonX.Y (from pyenv's versions or PATH), or nothing.
#   bash scripts/find_python.sh 3.13
for candidate in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$1".*/bin/python 2>/dev/null) \
                 "$(command -v "python$1" 2>/dev/null)"; do
    if [ -n "$candidate" ] && "$candidate" --version >/dev/null 2>&1; then
        echo "$candidate"
        exit 0
    fi
done
