"""Prints pyproject.toml's requirements, one a line, for scripts/setup.sh.

  python packaging/dependencies.py [--extras test,cuda] [--without NAME ...]

setup.sh installs the Python dependencies while llama.cpp compiles, before the llama-cpp-python wheel
exists, so it asks for them without that one (pip would otherwise build it from source a second time).
Reading the list from pyproject.toml keeps one list of requirements.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the TOML reader pip carries
    from pip._vendor import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirement_name(requirement: str) -> str:
    """The distribution a requirement names, normalised as pip compares names (PEP 503)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def requirements(extras: list[str], without: list[str], pyproject: Path = PYPROJECT) -> list[str]:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise ValueError(f"no extra {', '.join(unknown)} in {pyproject.name}; it has {', '.join(optional)}")
    listed = list(project["dependencies"]) + [r for e in extras for r in optional[e]]
    skipped = {requirement_name(w) for w in without}
    return [r for r in listed if requirement_name(r) not in skipped]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python packaging/dependencies.py", description=__doc__.splitlines()[0])
    p.add_argument("--extras", default="", help="comma-separated extras of pyproject.toml")
    p.add_argument("--without", action="append", default=[], help="a distribution to leave out (repeatable)")
    a = p.parse_args(argv)
    try:
        listed = requirements([e for e in a.extras.split(",") if e], a.without)
    except ValueError as exc:
        print(f"dependencies.py: {exc}", file=sys.stderr)
        return 2
    print("\n".join(listed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
