"""Write the tables the course's outline gives into the README (the series) and
docs/exercises.md (each exercise and its self-check), in place; tests/test_readme.py checks them.

    python scripts/write_outline_tables.py
"""

from pathlib import Path

from course_utils.tools.notebooks.pages import exercise_table, series_table, with_table

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"README.md": series_table, "docs/exercises.md": exercise_table}


def main() -> None:
    for name, table in TABLES.items():
        path = ROOT / name
        before = path.read_text(encoding="utf-8")
        after = with_table(before, table())
        path.write_text(after, encoding="utf-8")
        print(f"{name}: {'rewritten' if after != before else 'unchanged'}")


if __name__ == "__main__":
    main()
