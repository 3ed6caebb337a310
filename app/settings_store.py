"""Where the app keeps its settings: an INI file in the platformdirs config folder
(SPECTUNE_CONFIG_DIR overrides it, which the tests use)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def config_dir() -> Path:
    env = os.environ.get("SPECTUNE_CONFIG_DIR")
    path = Path(env) if env else Path(platformdirs.user_config_dir("spectune", appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def settings_path() -> Path:
    return config_dir() / "spectune.ini"
