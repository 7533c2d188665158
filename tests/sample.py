"""Which notebooks the tests run each per-notebook path on (a few), and the switch for all of them.

Strict nbval runs the whole series once. Every other path whose cost grows with the number of
notebooks (another device count, the student edition, nbgrader, the browser, the book) runs in the
end-to-end tests (``pytest -m e2e``) on the few steps that cover its kinds of cell, chosen in each
test file; with ``COURSE_ALL_NOTEBOOKS=1`` the same tests run on every step
(``scripts/test_all_notebooks.sh``, which CI runs once).
"""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ALL = os.environ.get("COURSE_ALL_NOTEBOOKS") == "1"


def sample(notebooks: list[Path], steps: set[str]) -> list[Path]:
    """``notebooks`` whose step number (``NN_``) is in ``steps``; all of them when ``ALL``."""
    unknown = steps - {p.name[:2] for p in notebooks}
    assert not unknown, f"no notebook for step(s) {sorted(unknown)}: update the sample"
    return list(notebooks) if ALL else [p for p in notebooks if p.name[:2] in steps]
