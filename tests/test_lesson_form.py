"""The lesson-form checker (``benchmarks/lesson_form.py``) counts what it says it counts, and
reports without gating."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("lesson_form", ROOT / "benchmarks/lesson_form.py")
lesson_form = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lesson_form)


def cell(kind: str, text: str) -> dict:
    return {"cell_type": kind, "source": text.splitlines(keepends=True), "metadata": {}}


NOTE = "<details><summary>Why</summary>\n\nBecause.\n</details>\n"
CELLS = [
    cell("markdown", "# Step 1\n\nText.\n"),
    cell("code", "N_DEVICES = 4"),
    cell("code", "import math\n\nimport jax\nfrom course_utils import (\n    data_mesh,\n)\n"),
    cell("markdown", NOTE),
    cell("code", "a = 1\n\n\nb = 2\nc = 3\n  \nfrom course_utils import checks\n"),
    cell("code", "import course_utils as cu\nx = 1\ny = 2\nz = 3\nw = 4\n"),
]


def write(tmp_path, name: str, cells: list[dict]) -> Path:
    path = tmp_path / f"{name}.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))
    return path


def test_each_count_reads_its_own_cells(tmp_path):
    form = lesson_form.lesson_form(write(tmp_path, "01_a", CELLS))
    # the markdown's characters with the <details> note; the import cell is the first one that
    # imports course_utils (5 non-blank lines), not a later one; no code cell is over 5
    assert form == ("01_a", len("# Step 1\n\nText.\n") + len(NOTE), 5, 5)
    assert lesson_form.import_cell_lines([cell("code", "import jax")]) == 0
    assert lesson_form.import_cell_lines([cell("code", "import course_utilsx")]) == 0


def test_the_budgets_name_the_notebooks_over_them_and_the_exit_status_is_0(tmp_path, capsys):
    long = write(tmp_path, "02_long", [cell("markdown", "x" * 9_001),
                                       cell("code", "from course_utils import a\n" * 16)])
    short = write(tmp_path, "03_short", CELLS)
    assert lesson_form.main([str(long), str(short), "--code", "5"]) == 0
    out = capsys.readouterr().out
    assert "markdown > 9,000 characters: 1 of 2 (02_long)" in out
    assert "import cell > 15 non-blank lines: 1 of 2 (02_long)" in out
    assert "a code cell > 5 non-blank lines: 1 of 2 (02_long)" in out
    total = next(line for line in out.splitlines() if line.startswith("total (2 notebooks)"))
    assert total.split()[3:] == [f"{9_001 + 16 + len(NOTE):,}", "16", "21"]
    assert lesson_form.main([str(short), "--imports", "4"]) == 0
    assert "import cell > 4 non-blank lines: 1 of 1 (03_short)" in capsys.readouterr().out


def test_every_step_is_counted():
    forms = [lesson_form.lesson_form(p)
             for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))]
    assert len(forms) >= 22 and all(f.markdown_chars > 0 and f.import_lines > 0 for f in forms)
