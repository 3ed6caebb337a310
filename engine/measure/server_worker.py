"""The engine worker that measures through llama-server: ``python -m engine.measure.server_worker [--server BIN]``.

It speaks engine.runtime.protocol exactly as engine.runtime.worker does (the same Worker, the same loop), with
engine.measure.server_engine.ServerEngine in place of libspecrt, which it never loads: so it runs where
SpecTune's own engine cannot start, and with the user's own llama-server build (--server).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

from engine.llama.devices import list_devices
from engine.llama.dialect import resolve_server
from engine.measure.server_engine import ServerEngine
from engine.runtime.worker import run


def _start(server: str | None) -> tuple[dict, Callable[..., Any]]:
    """The hello of a worker that runs llama-server, and its engine factory."""
    path = resolve_server(server)
    devices, build = list_devices(path)
    hello = {"llama": build, "devices": devices, "backends": {}, "engine_kind": "llama-server", "server": str(path)}
    # on a GPU a second server would hold a second copy of the weights in VRAM; on the CPU mmap shares them
    keep_two = all(d["name"].upper().startswith("CPU") for d in devices)
    return hello, functools.partial(ServerEngine, server=path, keep_two=keep_two)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.measure.server_worker")
    parser.add_argument("--server", help="the llama-server binary (default: the bundled one)")
    args = parser.parse_args(argv)
    return run(lambda: _start(args.server), "server_unavailable")


if __name__ == "__main__":
    raise SystemExit(main())
