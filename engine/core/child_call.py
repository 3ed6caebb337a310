"""A function of the engine computed in a child Python process, for the desktop app.

Two things the app does are seconds of pure Python: ranking the catalog for a machine
(engine.planning.advice.recommend.rank_for: a memory plan and a speed prediction per model, quantization and
pair, about 2 s) and parsing a real model's header (engine.models.gguf_inspect.read_header: a 150k-token
vocabulary and as many merges, about 0.09 s each, two files per pair). In a thread of the GUI process
either holds the GIL, and every repaint waits for it at each of its hundreds of handovers: the Lab's first
look froze for half a second to a second while they ran (bench/gui_stall.py, issue 30 #7). In a child
process they take another core instead. What goes in and what comes back are plain data (dataclasses,
paths), pickled over the child's stdin and stdout; only the functions in CALLABLE may be asked for.

    [sys.executable, "-m", "engine.core.child_call"]   (the frozen bundle routes the same argv here)
"""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys
from typing import Any

ARGV = (sys.executable, "-m", "engine.core.child_call")
TIMEOUT_S = 300.0
# what the app computes apart; anything else is refused by the child
CALLABLE = frozenset({("engine.planning.advice.recommend", "rank_for"), ("engine.models.gguf_inspect", "read_header")})


class ChildCallError(RuntimeError):
    """The child process could not run, or died without an answer."""


def call(module: str, function: str, **kwargs: Any) -> Any:
    """module.function(**kwargs), computed in a child process; an exception it raises there is raised here."""
    try:
        done = subprocess.run(
            list(ARGV), input=pickle.dumps((module, function, kwargs)), capture_output=True, timeout=TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ChildCallError(f"the child process for {function} could not run: {exc}") from exc
    if done.returncode != 0 or not done.stdout:
        tail = " / ".join(done.stderr.decode(errors="replace").strip().splitlines()[-3:])
        raise ChildCallError(f"the child process for {function} failed (exit status {done.returncode}): {tail}")
    ok, value = pickle.loads(done.stdout)
    if not ok:
        raise value
    return value


def main() -> int:
    module, function, kwargs = pickle.loads(sys.stdin.buffer.read())
    try:
        if (module, function) not in CALLABLE:
            raise ValueError(f"{module}.{function} is not computed in a child process (child_call.CALLABLE)")
        answer = (True, getattr(importlib.import_module(module), function)(**kwargs))
    except Exception as exc:  # noqa: BLE001 - sent back whole, raised again in the parent
        answer = (False, exc)
    sys.stdout.buffer.write(pickle.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
