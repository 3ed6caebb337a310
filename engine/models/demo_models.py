"""Where the shipped demo model family lives: a target and its draft, each in F16 and Q8_0.

The files are made by ``scripts/train_demo_family.py`` and described in
resources/models/README.md. This module only knows their names and paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.core.paths import RESOURCES_DIR

MODELS_DIR = RESOURCES_DIR / "models"
FAMILY = "spectune-demo"
ROLES = ("target", "draft")
QUANTS = ("f16", "q8_0")
# F16 by default: it runs on every llama.cpp CPU path. Q8_0 goes through ggml's AMX kernels on
# CPUs that have AMX, and the pinned build crashed there (SIGILL) on the machine the family was made on.
DEFAULT_QUANT = "f16"


class DemoModelError(FileNotFoundError):
    """A demo model file is missing, or an unknown role or quantization was asked for."""


@dataclass(frozen=True)
class DemoModel:
    role: str
    quant: str
    path: Path

    @property
    def exists(self) -> bool:
        return self.path.is_file()

    @property
    def size_bytes(self) -> int:
        return self.path.stat().st_size if self.exists else 0


def model_path(role: str, quant: str = DEFAULT_QUANT, directory: Path = MODELS_DIR) -> Path:
    """The path of one file, whether or not it exists."""
    if role not in ROLES:
        raise DemoModelError(f"unknown demo model role {role!r}; known: {', '.join(ROLES)}")
    if quant not in QUANTS:
        raise DemoModelError(f"unknown demo quantization {quant!r}; shipped: {', '.join(QUANTS)}")
    return directory / f"{FAMILY}-{role}-{quant}.gguf"


def list_demo_models(directory: Path = MODELS_DIR) -> list[DemoModel]:
    """Every file of the family (target first, then draft; F16, then Q8_0)."""
    return [DemoModel(role, quant, model_path(role, quant, directory)) for role in ROLES for quant in QUANTS]


def demo_pair(
    quant: str = DEFAULT_QUANT, draft_quant: str | None = None, directory: Path = MODELS_DIR
) -> tuple[Path, Path]:
    """(target, draft) paths; the draft takes the target's quantization unless told otherwise."""
    target = model_path("target", quant, directory)
    draft = model_path("draft", draft_quant or quant, directory)
    for path in (target, draft):
        if not path.is_file():
            raise DemoModelError(
                f"demo model missing: {path} (regenerate it with scripts/train_demo_family.py --out {directory})"
            )
    return target, draft
