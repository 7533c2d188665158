"""Each sub-package's docstring lists its modules, in a paragraph that starts ``Modules:``,
exactly the modules on disk (add or remove a module and its line goes with it)."""

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "course_utils"
SUB_PACKAGES = sorted(p.parent for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE)


def listed_modules(init: Path) -> list[str]:
    """The ``names`` of the docstring's ``Modules:`` paragraph, in order."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    paragraph = next((p for p in doc.split("\n\n") if p.startswith("Modules: ")), "")
    return re.findall(r"``(\w+)``:", paragraph)


def test_every_sub_package_is_found():
    names = {p.relative_to(PACKAGE).as_posix() for p in SUB_PACKAGES}
    assert {"checks", "results", "training", "tools", "tools/cluster"} <= names


@pytest.mark.parametrize("folder", SUB_PACKAGES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_the_docstring_lists_every_module_of_its_package(folder):
    on_disk = sorted(p.stem for p in folder.glob("*.py") if p.name != "__init__.py")
    assert listed_modules(folder / "__init__.py") == on_disk, (
        f"list them in {folder.relative_to(PACKAGE.parent)}/__init__.py's Modules: paragraph")
