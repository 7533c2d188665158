"""The lesson form of each notebook against its budgets: the characters of its markdown cells
(``<details>`` notes included), the non-blank lines of its largest code cell, and the non-blank
lines of its import cell (the first code cell that imports ``course_utils``).

    python benchmarks/lesson_form.py [--markdown 9000] [--imports 15] [--code N] [NOTEBOOK ...]

Prints one row a notebook, the totals, and the notebooks over each budget. It reports and does not
gate: the exit status is 0 whatever it finds (1 or 2 only for a notebook it cannot read or bad
arguments).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN_BUDGET = 9_000  # characters a notebook
IMPORT_BUDGET = 15  # non-blank lines of the import cell (issue 49's goal)
IMPORTS_COURSE_UTILS = re.compile(r"^\s*(from|import)\s+course_utils\b", re.MULTILINE)


class Form(NamedTuple):
    """One notebook's lesson form; ``import_lines`` is 0 where no code cell imports
    ``course_utils``."""

    name: str
    markdown_chars: int
    largest_code_lines: int
    import_lines: int


def source(cell: dict) -> str:
    """A cell's source as one string (nbformat stores a string or a list of lines)."""
    text = cell.get("source", "")
    return text if isinstance(text, str) else "".join(text)


def non_blank_lines(text: str) -> int:
    """The lines of ``text`` with something other than whitespace on them.

    >>> non_blank_lines("import jax\\n\\n   \\nx = 1\\n")
    2
    """
    return sum(1 for line in text.splitlines() if line.strip())


def markdown_chars(cells: list[dict]) -> int:
    """The characters of every markdown cell's source, ``<details>`` notes and newlines included.

    >>> markdown_chars([{"cell_type": "markdown", "source": ["# A\\n", "<details>b</details>"]},
    ...                 {"cell_type": "code", "source": "x = 1"}])
    24
    """
    return sum(len(source(c)) for c in cells if c["cell_type"] == "markdown")


def import_cell_lines(cells: list[dict]) -> int:
    """The non-blank lines of the first code cell that imports ``course_utils`` (0: none does).

    >>> import_cell_lines([{"cell_type": "code", "source": "import jax"},
    ...                    {"cell_type": "code", "source": "import jax\\n\\nimport course_utils"}])
    2
    """
    first = next((source(c) for c in cells if c["cell_type"] == "code"
                  and IMPORTS_COURSE_UTILS.search(source(c))), "")
    return non_blank_lines(first)


def lesson_form(path: Path) -> Form:
    """The lesson form of the notebook at ``path``."""
    cells = json.loads(path.read_text())["cells"]
    code = [non_blank_lines(source(c)) for c in cells if c["cell_type"] == "code"]
    return Form(path.stem, markdown_chars(cells), max(code, default=0), import_cell_lines(cells))


def over_budget(forms: list[Form], markdown: int, imports: int,
                code: int | None) -> dict[str, list[str]]:
    """The notebooks over each budget (``code`` None: no code-cell budget), by budget."""
    budgets = {f"markdown > {markdown:,} characters": lambda f: f.markdown_chars > markdown,
               f"import cell > {imports} non-blank lines": lambda f: f.import_lines > imports}
    if code is not None:
        budgets[f"a code cell > {code} non-blank lines"] = lambda f: f.largest_code_lines > code
    return {budget: [f.name for f in forms if over(f)] for budget, over in budgets.items()}


def table(forms: list[Form]) -> list[str]:
    """One row a notebook, then the totals (sums; the largest code cell's maximum)."""
    rows = [f"{'notebook':<36} {'markdown chars':>14} {'largest code cell':>17} "
            f"{'import cell':>11}"]
    rows += [f"{f.name:<36} {f.markdown_chars:>14,} {f.largest_code_lines:>17} "
             f"{f.import_lines:>11}" for f in forms]
    rows.append(f"{f'total ({len(forms)} notebooks)':<36} "
                f"{sum(f.markdown_chars for f in forms):>14,} "
                f"{max((f.largest_code_lines for f in forms), default=0):>17} "
                f"{sum(f.import_lines for f in forms):>11}")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks (default: every step, notebooks/NN_*.ipynb)")
    parser.add_argument("--markdown", type=int, default=MARKDOWN_BUDGET,
                        help=f"markdown characters a notebook (default {MARKDOWN_BUDGET:,})")
    parser.add_argument("--imports", type=int, default=IMPORT_BUDGET,
                        help=f"non-blank lines of the import cell (default {IMPORT_BUDGET})")
    parser.add_argument("--code", type=int, default=None,
                        help="non-blank lines of a code cell (default: no budget)")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    forms = [lesson_form(p) for p in paths]
    print("\n".join(table(forms)))
    for budget, names in over_budget(forms, args.markdown, args.imports, args.code).items():
        listed = f" ({', '.join(names)})" if names else ""
        print(f"{budget}: {len(names)} of {len(forms)}{listed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
