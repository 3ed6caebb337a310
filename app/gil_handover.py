"""The GUI thread gets Python's GIL back within a millisecond.

PySide asks for the GIL on every event Qt delivers to a widget whose class Python defines (to look for a
Python override of the event's virtual method), so a repaint of the window takes it hundreds of times. A
background thread running Python (a header read, the catalog's ranking, a speed prediction) keeps it until
the interpreter's switch interval runs out, 5 ms by default: each handover then cost the GUI thread up to
5 ms, and a repaint that should take a few milliseconds froze the window for hundreds (bench/gui_stall.py,
issue 30 #7). A shorter interval makes the background thread hand it over sooner; its own work slows by
the extra switches, which the GUI process's background work can afford.
"""

from __future__ import annotations

import sys

SWITCH_INTERVAL_S = 0.001  # the interpreter's default is 0.005


def hand_over_quickly() -> None:
    """Set the GUI process's switch interval (idempotent; call it from the GUI's start)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
