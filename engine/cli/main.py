"""The ``spectune`` command line: the parser of every subcommand, and the one place errors end.

  spectune run (--target T.gguf [--draft D.gguf] | --demo) [knobs] (--prompt TEXT | --prompt-file F | --workload W)
  spectune demo [--json]       the headless main job on the demo pair
  spectune serve ...           the settings served behind SpecTune's proxy, each request watched
  spectune server-path         where the bundled llama-server is
  spectune gui                 the desktop app (when a display is available)

Every run goes through the engine worker process (engine.runtime.client), as the GUI's
do, so a llama.cpp abort ends in a clear error instead of a dead CLI. Each command
group lives in a module of its own here and adds its parsers with ``register``.
"""

from __future__ import annotations

import argparse
import os
import sys

from engine.cli import catalog, deploy, library, models, predict, run, serve
from engine.core.settings import SettingsError
from engine.core.workloads import WorkloadError
from engine.runtime.client import EngineError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="spectune", description="Tune speculative decoding for local GGUF models.")
    sub = p.add_subparsers(dest="command")
    run.register(sub)  # run, demo, tune, server-path, gui
    models.register(sub)  # gpus, inspect, compat, plan
    predict.register(sub)  # predict
    catalog.register(sub)  # recommend, presets
    library.register(sub)  # pull, models
    deploy.register(sub)  # export, validate, history
    serve.register(sub)  # serve
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.command is None:
        # no subcommand: the app's main job, GUI when a display exists
        has_display = bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) or sys.platform == "win32"
        a = parser.parse_args(["gui", "--demo"] if has_display else ["demo"])
    try:
        return a.func(a)
    except (SettingsError, EngineError, WorkloadError, OSError) as exc:
        kind = getattr(exc, "kind", type(exc).__name__)
        print(f"spectune: error ({kind}): {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
