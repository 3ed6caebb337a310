"""The ``spectune`` subcommands about model files to get and files already here.

  spectune pull NAME [--dir DIR] [--cache-dir DIR] [--revision REV] [--json] [--quiet]
      NAME: a preset from the catalog (target and draft) or REPO:FILENAME
  spectune models [--json] [--add DIR] [--remove DIR]

engine/cli/main.py adds them with ``register(sub)``. Errors print one line, ``spectune: error: ...``, on
stderr and return exit code 2; Ctrl+C during a pull keeps the partial file (exit 130) and the next pull
resumes it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TextIO

from engine.cli.errors import guarded
from engine.models.downloads import DownloadError, Progress, format_progress, pull
from engine.models.gguf_check import GGUFError
from engine.models.library import LibraryError, add_folder, format_library, remove_folder, scan

EXIT_INTERRUPTED = 130
PLAIN_PROGRESS_INTERVAL_S = 10.0  # a log file gets one line this often, not a carriage-return stream


# ValueError: the catalog's CatalogError (an unknown preset)
_guarded = guarded(DownloadError, LibraryError, GGUFError, ValueError)


class _ProgressPrinter:
    """A progress line on a terminal (rewritten in place); on a pipe, one line every few seconds."""

    def __init__(self, out: TextIO):
        self.out = out
        self.tty = out.isatty()
        self.last_plain = 0.0
        self.width = 0

    def __call__(self, p: Progress) -> None:
        line = format_progress(p)
        if self.tty:
            pad = max(self.width - len(line), 0)
            self.width = len(line)
            end = "\n" if p.stage == "done" else ""
            self.out.write(f"\r{line}{' ' * pad}{end}")
            if end:
                self.width = 0
        else:
            now = time.monotonic()
            if p.stage != "done" and now - self.last_plain < PLAIN_PROGRESS_INTERVAL_S:
                return
            self.last_plain = now
            self.out.write(line + "\n")
        self.out.flush()


def cmd_pull(a: argparse.Namespace) -> int:
    options = dict(
        cache_dir=a.cache_dir, local_dir=a.dir, on_progress=None if a.quiet else _ProgressPrinter(sys.stderr)
    )
    options.update(a.download_options or {})
    name = a.name
    if a.revision and ":" in name and "@" not in name.split(":", 1)[0]:
        repo, filename = name.split(":", 1)
        name = f"{repo}@{a.revision}:{filename}"
    try:
        result = pull(name, catalog=a.catalog, **options)
    except KeyboardInterrupt:
        print("\nspectune: pull interrupted; the partial file is kept and the next pull resumes it", file=sys.stderr)
        return EXIT_INTERRUPTED
    broken = [f for f in result.files if f.gguf_error]
    if broken:
        raise GGUFError("; ".join(f"{f.path}: {f.gguf_error}" for f in broken))
    if a.json:
        print(json.dumps(result.to_dict()))
    else:
        for f in result.files:
            print(f"{f.role:<6} {f.path}  ({f.how()})")
    if result.compat is not None and not result.compat["compatible"]:
        print(
            "spectune: warning: llama.cpp will refuse this draft for this target: "
            + "; ".join(result.compat["reasons"]),
            file=sys.stderr,
        )
    return 0


def cmd_models(a: argparse.Namespace) -> int:
    for folder in a.add or []:
        path = add_folder(folder)
        print(f"added {path}", file=sys.stderr)
    for folder in a.remove or []:
        path = remove_folder(folder)
        print(f"removed {path}", file=sys.stderr)
    lib = scan(a.sources)
    print(json.dumps(lib.to_dict()) if a.json else format_library(lib))
    return 0


def register(
    subparsers: argparse._SubParsersAction, *, catalog=None, sources=None, download_options: dict | None = None
) -> None:
    """Add pull and models. catalog, sources, download_options: stand-ins for tests (a catalog object, the
    library's sources, keyword arguments for engine.models.downloads.download_files such as endpoint)."""
    p = subparsers.add_parser("pull", help="download a preset pair or REPO:FILENAME from the Hugging Face hub")
    p.add_argument(
        "name",
        help="a preset name (see spectune presets) or REPO:FILENAME, e.g. "
        "bartowski/Qwen2.5-0.5B-Instruct-GGUF:Qwen2.5-0.5B-Instruct-Q8_0.gguf",
    )
    p.add_argument("--dir", type=Path, help="put the files in this folder instead of the Hugging Face cache")
    p.add_argument("--cache-dir", type=Path, help="the Hugging Face cache to use (default: HF_HUB_CACHE)")
    p.add_argument("--revision", help="a branch, tag or commit of the repository (REPO:FILENAME only)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--json", action="store_true", help="print one JSON object with the paths")
    p.set_defaults(func=_guarded(cmd_pull), catalog=catalog, download_options=download_options)

    m = subparsers.add_parser(
        "models",
        help="GGUF files on this machine (HF cache, LM Studio, llama.cpp, "
        "Ollama, added folders) and the pairs they make",
    )
    m.add_argument("--add", action="append", metavar="DIR", help="also look in this folder (kept)")
    m.add_argument("--remove", action="append", metavar="DIR", help="stop looking in an added folder")
    m.add_argument("--json", action="store_true", help="print one JSON object")
    m.set_defaults(func=_guarded(cmd_models), sources=sources)
