"""Files the tests read from outside the engine: packaging/'s scripts (not a package) and the pinned llama.cpp
source archive that scripts/setup.sh downloads."""

from __future__ import annotations

import importlib.util
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent


def packaging_script(name: str) -> ModuleType:
    """packaging/NAME.py, imported by path as spectune_packaging_NAME."""
    module_name = f"spectune_packaging_{name}"
    spec = importlib.util.spec_from_file_location(module_name, REPO / "packaging" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def pinned_llama_source(relative: str) -> str:
    """vendor/llama.cpp/RELATIVE of the pinned sdist, as text; the test is skipped when the archive is absent."""
    from engine.llama.install import sdist_path

    sdist = sdist_path()
    if not sdist.exists():
        pytest.skip(f"the pinned llama-cpp-python source archive is not at {sdist} (scripts/setup.sh downloads it)")
    with tarfile.open(sdist) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(f"vendor/llama.cpp/{relative}"))
        data = tar.extractfile(member)
        assert data is not None
        return data.read().decode()
