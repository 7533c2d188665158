"""The README and the pages under docs/ are the truth: their tables and recipes follow the package,
the outline and the notebooks."""

import fnmatch
import json
import re
import tomllib
from pathlib import Path

import course_utils
import course_utils.checks
from course_utils.tools.notebooks.pages import exercise_table, series_table, with_table

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _section(heading: str, text: str = README) -> str:
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end >= 0 else None]


def _table_rows(text: str) -> list[list[str]]:
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows[1:]]  # without the header


def _graded() -> dict[str, str]:
    """Step number → the check the notebook's check cell calls, for every notebook with an
    exercise."""
    graded = {}
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            if "check" in cell["metadata"].get("tags", []):
                graded[path.name[:2]] = re.search(r"(check_\w+)\(", "".join(cell["source"]))[1]
    return graded


def test_the_api_table_is_the_export_list():
    api = (DOCS / "api.md").read_text()
    first_column = [row[0] for row in _table_rows(_section("# The `course_utils` API", api))]
    named = [name for cell in first_column for name in re.findall(r"`(\w+)`", cell)]
    assert len(named) == len(set(named)), "a name is listed twice"
    assert sorted(named) == sorted(course_utils.__all__)


def test_every_facade_name_is_used_or_listed_for_users():
    api = (DOCS / "api.md").read_text()
    listed = re.findall(r"`(\w+)`", api.split("**For users beyond the notebooks.**")[1]
                        .split("\n\n")[0])
    code = [path.read_text() for folder in ("scripts", "benchmarks")
            for path in sorted((ROOT / folder).glob("*.py"))]
    code += ["".join(cell["source"]) for path in NOTEBOOKS
             for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"]
    used = {name for name in course_utils.__all__
            if any(re.search(rf"\b{name}\b", text) for text in code)}
    assert sorted(set(course_utils.__all__) - used) == sorted(listed), (
        "a facade name no notebook, script or benchmark uses: list it for users in docs/api.md, "
        "or drop it")


def test_the_exercise_table_is_the_one_the_outline_writes():
    table = exercise_table()
    exercises = (DOCS / "exercises.md").read_text()
    assert with_table(exercises, table) == exercises, f"docs/exercises.md's table: {WRITE}"
    listed = {row[0]: re.match(r"`(check_\w+)`", row[2])[1] for row in _table_rows(table)}
    assert listed == _graded()
    assert set(listed.values()) <= set(course_utils.checks.__all__)


def test_the_nbgrader_recipe_copies_every_graded_notebook():
    # the notebooks holding a solution, found by grep, whatever their numbers
    (line,) = [line for line in README.splitlines() if line.startswith("cp ") and "source/" in line]
    grep = re.fullmatch(r'cp \$\(grep -l "([^"]+)" \$R/(\S+)\) source/ps1/ +#.*', line)
    assert grep, line
    copied = sorted(p.name[:2] for p in NOTEBOOKS
                    if fnmatch.fnmatch(p.name, grep[2]) and grep[1] in p.read_text())
    assert copied == sorted(_graded())


WRITE = "python scripts/write_outline_tables.py writes it"


def test_the_series_table_is_the_one_the_outline_writes():
    # the outline lists every notebook (tests/test_notebooks.py); a new step's row comes from it
    table = series_table()
    assert table in _section("## The series")
    assert with_table(README, table) == README, f"the README's series table: {WRITE}"


def test_course_student_and_the_readme_say_it_needs_the_instructor_extra(capsys):
    from course_utils.tools.cli import main

    try:
        main(["student", "--help"])
    except SystemExit:
        pass
    assert 'pip install -e ".[instructor]"' in capsys.readouterr().out
    assert "`course student` uses nbgrader's own preprocessors, so it needs the `instructor`" in (
        README
    )


def test_the_readme_names_the_end_to_end_command_and_ci_runs_it():
    quick_start = README.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```")[0]
    commands = [line.split("#")[0].strip() for line in quick_start.splitlines()]
    assert "pytest" in commands and "pytest -m e2e" in commands
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    # CI leaves out of the e2e step the four tests its next step runs on every notebook
    assert "pytest" in ci and any(line.split(" \\")[0] == "pytest -m e2e" for line in ci)
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    assert "-m 'not e2e'" in addopts["ini_options"]["addopts"]  # the README's pytest leaves them


def test_the_readme_names_every_page_under_docs_and_no_other():
    named = set(re.findall(r"`(docs/[\w.-]+\.md)`", README))
    assert named == {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert len(README.encode()) < 13_000, "the README is read in five minutes: move reference out"


def test_the_readme_says_what_a_self_check_is_as_the_instructor_page_does():
    from course_utils.tools.notebooks.pages import FEEDBACK

    grading = " ".join(_section("## Instructors").split())
    assert " ".join(FEEDBACK.split()) in grading
