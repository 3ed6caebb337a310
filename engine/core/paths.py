"""Where SpecTune's own files are: the source tree, its resources, and the user's data and cache folders.

SPECTUNE_DATA_DIR and SPECTUNE_CACHE_DIR move the user folders (tests and CI use them).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

REPO_ROOT = Path(__file__).resolve().parents[2]
RESOURCES_DIR = REPO_ROOT / "resources"
NATIVE_DIR = REPO_ROOT / "native"


def data_dir() -> Path:
    """The history database and the library's folder list live here."""
    env = os.environ.get("SPECTUNE_DATA_DIR")
    return Path(env) if env else Path(platformdirs.user_data_dir("spectune", appauthor=False))


def cache_dir() -> Path:
    """Built libraries, the demo's synthetic pair and llama-server's --help text live here."""
    env = os.environ.get("SPECTUNE_CACHE_DIR")
    return Path(env) if env else Path(platformdirs.user_cache_dir("spectune", appauthor=False))
