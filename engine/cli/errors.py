"""One way for every ``spectune`` subcommand to fail: a line on stderr and exit status 2.

Known failures (bad input, a missing file, an engine or server error) must never
end in a traceback; each CLI module names the exception types it expects.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

EXIT_ERROR = 2

Command = Callable[[argparse.Namespace], int]


def error_line(exc: BaseException) -> str:
    """The message on one line; an OSError as its reason and the file it concerns."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        message = f"{exc.strerror}{where}"
    else:
        message = str(exc) or type(exc).__name__
    return " ".join(message.splitlines())


def guarded(
    *known: type[BaseException], lazy: Callable[[], tuple[type[BaseException], ...]] | None = None
) -> Callable[[Command], Command]:
    """Decorator: the ``known`` exceptions (plus OSError, plus ``lazy()``'s types, imported only when
    a command fails) become ``spectune: error: ...`` and EXIT_ERROR."""

    def wrap(command: Command) -> Command:
        def run(a: argparse.Namespace) -> int:
            try:
                return command(a)
            except Exception as exc:
                types = (*known, OSError, *(lazy() if lazy else ()))
                if not isinstance(exc, types):
                    raise
                print(f"spectune: error: {error_line(exc)}", file=sys.stderr)
                return EXIT_ERROR

        run.__name__ = command.__name__
        return run

    return wrap
