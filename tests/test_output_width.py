"""Printed tables fit the site's output column: at 1280 px a 13 px monospace output block holds
87 characters (measured in Chromium), so an aligned line (columns set apart by two or more
spaces) longer than ``COLUMNS`` would wrap and lose its alignment. Prose lines may wrap."""

import json
import re
from pathlib import Path

import pytest

COLUMNS = 86
NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ALIGNED = re.compile(r"\S {2,}\S")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_printed_table_fits_the_output_column(path):
    wide = []
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", ""))
            wide += [f"cell {i}: {line}" for line in text.splitlines()
                     if len(line) > COLUMNS and ALIGNED.search(line.strip())]
    assert wide == []
