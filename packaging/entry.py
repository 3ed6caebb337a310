"""The frozen SpecTune's one entry point: GUI, CLI and engine worker in one binary.

engine.runtime.client starts the worker as ``[sys.executable, "-m", "engine.runtime.worker"]``.
In a PyInstaller bundle sys.executable is this binary, so the same argv lands
here and is routed to engine.runtime.worker.main() (and the app's child computations, ``-m
engine.core.child_call``, to its main()); ``spectune gui`` starts the app as
``-m app``, routed to the desktop app. Everything else goes to the CLI
when the first argument is one of its subcommands (or --help), and to the
desktop app otherwise (no arguments, or app options such as --selftest), unless
there is no display to open it on.

In the bundle, llama.cpp's install sits in ``<bundle>/llama/site-packages``
(bin/llama-server, lib/, include/llama.h) beside libspecrt. That folder goes on
sys.path, which is where engine.llama.install.find_install() looks for
site-packages roots, and SPECTUNE_SPECRT points at the bundled libspecrt, so
the worker loads it instead of building native/. Both travel to the worker
through the environment and sys.path set up here again in the child.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# the only modules ``spectune -m MODULE`` may run: a frozen app is not a Python interpreter
# (``spectune gui`` starts the app as ``-m app``, since the engine never imports it)
RUNNABLE_MODULES = ("engine.runtime.worker", "engine.core.child_call", "app")
LLAMA_DIR = ("llama", "site-packages")


def specrt_name(platform: str = sys.platform) -> str:
    return {"win32": "specrt.dll", "darwin": "libspecrt.dylib"}.get(platform, "libspecrt.so")


def bundle_paths(bundle: Path, platform: str = sys.platform) -> tuple[Path, Path]:
    """(the llama.cpp site-packages root, the bundled libspecrt) inside an unpacked bundle."""
    root = bundle.joinpath(*LLAMA_DIR)
    # lib/ on every platform; on Windows llama.cpp's DLLs sit in bin/ beside llama-server.exe, and the
    # binding adds that folder to the DLL search path before it loads specrt.dll
    return root, root / "lib" / specrt_name(platform)


def prepare_frozen(bundle: Path, environ: dict | None = None, path: list | None = None) -> None:
    """Point the engine at the bundled llama.cpp and libspecrt (a user's SPECTUNE_SPECRT wins)."""
    environ = os.environ if environ is None else environ
    path = sys.path if path is None else path
    root, specrt = bundle_paths(bundle)
    if str(root) not in path:
        path.append(str(root))
    environ.setdefault("SPECTUNE_SPECRT", str(specrt))


def route(argv: list[str], cli_commands: set[str], has_display: bool = True) -> tuple[str, list[str]]:
    """Which part of SpecTune an argv (without the program name) is for: ("worker" | "child" | "cli" | "gui",
    args).

    No arguments and no display (an ssh session): the CLI, whose bare ``spectune`` runs the headless
    demo, as the unfrozen command does.
    """
    if argv[:1] == ["-m"]:
        if len(argv) < 2 or argv[1] not in RUNNABLE_MODULES:
            wanted = argv[1] if len(argv) > 1 else "(nothing)"
            raise SystemExit(f"spectune: -m {wanted}: this build runs only -m {' / -m '.join(RUNNABLE_MODULES)}")
        return {"app": "gui", "engine.core.child_call": "child"}.get(argv[1], "worker"), argv[2:]
    if argv and (argv[0] in cli_commands or argv[0] in ("-h", "--help")):
        return "cli", argv
    if not argv and not has_display:
        return "cli", argv
    return "gui", argv


def has_display(environ=os.environ, platform: str = sys.platform) -> bool:
    if platform != "linux" or environ.get("QT_QPA_PLATFORM"):
        return True
    return bool(environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))


def cli_commands() -> set[str]:
    from engine.cli.main import build_parser

    parser = build_parser()
    for action in parser._actions:  # argparse keeps subcommands only here
        if action.choices and action.dest == "command":
            return set(action.choices)
    return set()


def _std_streams_from_fds() -> None:
    """A windowed Windows build starts without sys.stdin/stdout/stderr even when its handles are the
    client's pipes; the worker speaks over them, so open them from the file descriptors."""
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        if getattr(sys, name) is None:
            try:
                setattr(sys, name, os.fdopen(fd, mode, closefd=False))
            except OSError:
                pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if getattr(sys, "frozen", False):
        prepare_frozen(Path(getattr(sys, "_MEIPASS", Path(sys.executable).parent)))
    kind, args = route(argv, cli_commands() if argv[:1] != ["-m"] else set(), has_display())
    if kind == "worker":
        from engine.runtime.worker import main as worker_main

        _std_streams_from_fds()
        sys.argv = [sys.executable] + args
        return worker_main()
    if kind == "child":  # the desktop app's ranking and header parses, in a child process
        from engine.core.child_call import main as child_main

        _std_streams_from_fds()
        return child_main()
    if kind == "cli":
        from engine.cli.main import main as cli_main

        return cli_main(args)
    from app.main import main as gui_main

    return gui_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
