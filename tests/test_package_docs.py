"""Every package's docstring names each of its modules and subpackages, one per line: where a newcomer
looks first to find which file holds a concern (issue 29). A module added without a line fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from engine.core.paths import REPO_ROOT

ROOT = REPO_ROOT
PACKAGES = sorted(
    p.parent
    for top in ("engine", "app", "testmodels")
    for p in (ROOT / top).rglob("__init__.py")
    if "__pycache__" not in p.parts
)


def members(package: Path) -> list[str]:
    modules = [f.stem for f in package.glob("*.py") if f.stem not in ("__init__", "__main__")]
    subpackages = [d.name for d in package.iterdir() if (d / "__init__.py").is_file()]
    return sorted(modules + subpackages)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_package_docstring_names_every_module_on_a_line_of_its_own(package: Path):
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")), clean=False) or ""
    listed = {m.group(1) for m in re.finditer(r"^[ ]*(\w+)/?[ ]{2,}\S", doc + "\n", re.MULTILINE)}
    missing = [m for m in members(package) if m not in listed]
    assert not missing, f"{package.relative_to(ROOT)}/__init__.py does not name {missing} on a line of their own"


def test_the_check_sees_every_package():
    names = {str(p.relative_to(ROOT)) for p in PACKAGES}
    assert {"engine", "engine/planning", "app", "app/pages/lab"} <= names


def test_no_function_is_over_80_lines():
    """Issue 50: a function a newcomer can read on one screen. A longer one is split where its parts have names."""
    long = []
    for top in ("engine", "app", "testmodels"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > 80:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long
