"""Notebook hygiene, and steps run with another device count.

Strict nbval checks the stored run of the whole series.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from sample import sample

from course_utils.tools.notebooks.outline import (
    CAPSTONE,
    OUTLINE,
    PART_FIVE,
    PART_FOUR,
    PART_ONE,
    PART_SIX,
    PART_THREE,
    PART_TWO,
    parts,
)

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SECRETS = re.compile(r"/(tmp|root|home|work|Users)/|ipykernel_\d+")
PART_ORDER = [PART_ONE, PART_TWO, PART_THREE, CAPSTONE, PART_FOUR, PART_FIVE, PART_SIX]


def test_the_outline_lists_every_step_with_its_title_and_check():
    from course_utils.tools.notebooks.chapters import read_step
    from course_utils.tools.notebooks.pages import graded

    assert [s.notebook for s in OUTLINE] == [p.stem for p in NOTEBOOKS]
    assert [s.number for s in OUTLINE] == list(range(1, len(NOTEBOOKS) + 1))
    assert [s.title for s in OUTLINE] == [read_step(p).title for p in NOTEBOOKS]
    for step, path in zip(OUTLINE, NOTEBOOKS):
        called, _ = graded(nbformat.read(path, as_version=4))
        assert called == ([step.exercise.check] if step.exercise else []), path.name
    assert set(PART_ORDER) == {s.part for s in OUTLINE}
    assert [part for part, _ in parts(list(OUTLINE))] == PART_ORDER  # each part in one run


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_hygiene(path):
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1)), (
        "run top to bottom once"
    )
    assert nb["cells"][0]["cell_type"] == "markdown" and nb["cells"][0]["source"][0].startswith(
        "# Step "
    )
    assert (
        code[0]["metadata"].get("tags") == ["parameters"]
        and "".join(code[0]["source"]) == "N_DEVICES = 4"
    )
    for cell in nb["cells"]:
        assert "execution" not in cell["metadata"], "per-cell timing metadata"
        kinds = [(o["output_type"], o.get("name")) for o in cell.get("outputs", [])]
        assert all(a != b or a[0] != "stream" for a, b in zip(kinds, kinds[1:])), (
            "consecutive stream outputs: save with course run --in-place"
        )
        for output in cell.get("outputs", []):
            assert output["output_type"] != "error"
            assert not SECRETS.search(json.dumps(output)), (
                f"machine path in an output of {path.name}"
            )
    last = "".join(code[-1]["outputs"][0]["text"])
    assert last == f"PASS: {path.stem}\n"
    assert any(
        "Check yourself" in "".join(c["source"])
        for c in nb["cells"]
        if c["cell_type"] == "markdown"
    )


def test_solution_cells_are_marked():
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            tagged = "solution" in cell["metadata"].get("tags", [])
            assert tagged == ("### BEGIN SOLUTION" in source), (
                f"{path.name}: solution tag and markers disagree"
            )
            if tagged:
                assert source.count("### BEGIN SOLUTION") == source.count("### END SOLUTION") == 1
                # nbgrader only strips code solutions; a markdown answer would be released
                assert cell["cell_type"] == "code", f"{path.name}: a markdown solution cell"
    exercise = json.loads(NOTEBOOKS[6].read_text())
    assert any("solution" in c["metadata"].get("tags", []) for c in exercise["cells"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_solution_is_followed_by_a_passing_self_check(path):
    cells = json.loads(path.read_text())["cells"]
    tags = [c["metadata"].get("tags", []) for c in cells]
    for i in [i for i, t in enumerate(tags) if "solution" in t]:
        check = next(
            j for j in range(i + 1, len(cells)) if "check" in tags[j] or "solution" in tags[j]
        )
        assert "check" in tags[check], f"{path.name}: solution cell {i} has no check cell after it"
        assert "check_" in "".join(cells[check]["source"])
        assert "".join(cells[check]["outputs"][0]["text"]).startswith("PASSED: ")


SOLUTION_CELL = {"solution": True, "grade": False, "locked": False, "schema_version": 3}
CHECK_CELL = {"solution": False, "grade": True, "locked": True, "schema_version": 3}


def test_solution_and_check_cells_carry_consistent_nbgrader_metadata():
    # nbgrader generate_assignment refuses solution markers outside a solution cell; autograde
    # scores the check cells (points) and restores their source from the release (locked)
    grade_ids, points = [], {}
    for path in NOTEBOOKS:
        for index, cell in enumerate(json.loads(path.read_text())["cells"]):
            tags = cell["metadata"].get("tags", [])
            meta = cell["metadata"].get("nbgrader")
            where = f"{path.name}, cell {index}"
            kind = "solution" if "solution" in tags else "check" if "check" in tags else None
            if kind is None:
                assert meta is None, f"{where}: nbgrader metadata on a cell tagged neither"
                continue
            assert "solution" not in tags or "check" not in tags, where
            assert meta is not None, f"{where}: tagged {kind!r} without nbgrader metadata"
            expected = SOLUTION_CELL if kind == "solution" else CHECK_CELL
            assert {k: meta.get(k) for k in expected} == expected, where
            extra = {"grade_id", "points"} if kind == "check" else {"grade_id"}
            assert set(meta) == set(expected) | extra, f"{where}: other nbgrader keys"
            if kind == "check":
                assert isinstance(meta["points"], int) and meta["points"] > 0, where
                points[path.stem[:2]] = points.get(path.stem[:2], 0) + meta["points"]
            assert re.fullmatch(rf"{path.stem[:2]}-{kind}(-\d+)?", meta["grade_id"]), where
            grade_ids.append(meta["grade_id"])
    assert len(grade_ids) == len(set(grade_ids)), "grade_ids are not unique"
    assert points == {f"{s.number:02d}": 1 for s in OUTLINE if s.exercise}


# at 8 devices: the mesh setup (01), the first kernels, exercise and figure (03), shapes derived
# from N_DEVICES (04, asserted below) and the multi-process cell (09); every step at 1, 2, 3, 6
# and 8 devices: scripts/test_all_notebooks.sh (CI)
AT_8_DEVICES = sample(NOTEBOOKS, {"01", "03", "04", "09"})


@pytest.mark.e2e
@pytest.mark.parametrize("n_devices", [8])
def test_the_series_runs_green_with_other_device_counts(tmp_path, n_devices):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "course_utils.tools.cli",
            "run",
            *[str(p) for p in AT_8_DEVICES],
            "--devices",
            str(n_devices),
            "--out",
            str(tmp_path),
            "--jobs",
            "1",  # the suite's workers already fill the machine
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"{len(AT_8_DEVICES)} passed, 0 failed" in done.stdout
    setup = json.dumps(json.loads((tmp_path / "01_mesh_setup.ipynb").read_text()))
    assert f"mesh shape: {{'data': {n_devices}}}" in setup
    checks = json.dumps(json.loads((tmp_path / "04_placement_checks.ipynb").read_text()))
    assert (
        f"reduce-scatter  {[(8 // n_devices,)] * n_devices}" in checks
    )  # shapes derived from N_DEVICES
