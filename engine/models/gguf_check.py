"""A quick structural check of a GGUF file before llama.cpp is asked to load it.

llama.cpp reports a broken file only through its log; this check names the
problem (missing file, wrong magic, unsupported version, a header that cannot
be parsed, tensor data that runs past the end of a truncated file) in one
sentence, so the user learns what is wrong without reading logs.
"""

from __future__ import annotations

import struct
from pathlib import Path

GGUF_MAGIC = b"GGUF"


class GGUFError(ValueError):
    """The file is not a usable GGUF; the message says why."""


def check_gguf(path: str | Path, role: str = "model") -> None:
    path = Path(path)
    if not path.exists():
        raise GGUFError(f"{role} file not found: {path}")
    if not path.is_file():
        raise GGUFError(f"{role} path is not a file: {path}")
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(24)
    if len(head) < 24:
        raise GGUFError(f"{role} file {path.name} is {size} bytes, too short to be a GGUF model")
    if head[:4] != GGUF_MAGIC:
        raise GGUFError(f"{role} file {path.name} is not a GGUF file (it starts with {head[:4]!r}, not b'GGUF')")
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", head, 4)
    if version not in (2, 3):
        raise GGUFError(f"{role} file {path.name} has GGUF version {version}; llama.cpp reads versions 2 and 3")
    if n_tensors > 1_000_000 or n_kv > 1_000_000:
        raise GGUFError(
            f"{role} file {path.name} has an implausible header ({n_tensors} tensors, {n_kv} keys): the file is damaged"
        )
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:
        _check_length(path, role, size)  # a file cut inside its data is said to be truncated, by how much
        raise GGUFError(
            f"{role} file {path.name} has a header that cannot be read ({exc}); the file is damaged or truncated"
        ) from exc
    end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    if end > size:
        raise _truncated(path, role, end, size)
    if not reader.tensors:
        raise GGUFError(f"{role} file {path.name} holds no tensors (a vocab-only file cannot generate)")


def _truncated(path: Path, role: str, needed: int, size: int) -> GGUFError:
    return GGUFError(
        f"{role} file {path.name} is truncated: its tensors need {needed} bytes but the file has "
        f"{size} ({100.0 * size / needed:.1f}% present); download it again"
    )


def _check_length(path: Path, role: str, size: int) -> None:
    """A file gguf.GGUFReader cannot read: when its header is whole (engine.models.gguf_inspect reads nothing
    else) but the tensor data stops short, say so; the reader's own error is a numpy reshape message that
    says nothing of the truncation."""
    from engine.models.gguf_inspect import GGUFInspectError, GGUFTruncatedError, inspect_gguf

    try:
        inspect_gguf(path)
    except GGUFTruncatedError as cut:
        raise _truncated(path, role, cut.needed, size) from None
    except GGUFInspectError:
        return  # a damaged header: the reader's error says what it can
