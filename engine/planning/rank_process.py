"""The catalog's ranking in a process of its own, for the desktop app.

Ranking the catalog for a machine (engine.planning.recommend: a memory plan and a speed prediction per
model, quantization and pair) is about two seconds of Python. In a thread of the GUI process it holds the
GIL, and every repaint of the window waits for it at each of its hundreds of handovers: the first look at
the Lab froze for half a second while the Start page's ranking ran (bench/gui_stall.py, issue 30 #7). In a
child process it takes the other core instead. The hardware is probed in the parent (NVML, or the stand-in
a test passes), so the child only computes; what goes in and what comes back are plain dataclasses, sent
pickled over the child's stdin and stdout (a few tens of KB; this process wrote them both).

    [sys.executable, "-m", "engine.planning.rank_process"]   (the frozen bundle routes the same argv here)
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from typing import Any

ARGV = (sys.executable, "-m", "engine.planning.rank_process")
TIMEOUT_S = 300.0


class RankProcessError(RuntimeError):
    pass


def call(function: str, **kwargs: Any) -> Any:
    """engine.planning.recommend.FUNCTION(**kwargs), computed in a child process; its exceptions are raised
    here as they were there."""
    try:
        done = subprocess.run(
            list(ARGV), input=pickle.dumps((function, kwargs)), capture_output=True, timeout=TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RankProcessError(f"the ranking process could not run: {exc}") from exc
    if done.returncode != 0 or not done.stdout:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise RankProcessError(f"the ranking process failed (exit status {done.returncode}): {' / '.join(tail)}")
    ok, value = pickle.loads(done.stdout)
    if not ok:
        raise value
    return value


def main() -> int:
    from engine.planning import recommend

    function, kwargs = pickle.loads(sys.stdin.buffer.read())
    try:
        answer = (True, getattr(recommend, function)(**kwargs))
    except Exception as exc:  # noqa: BLE001 - sent back whole, raised again in the parent
        answer = (False, exc)
    sys.stdout.buffer.write(pickle.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
