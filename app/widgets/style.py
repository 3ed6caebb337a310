"""The app's colours, in one place, and rich text in them.

Lines and text use Material Design's darker shades; the pages give three of them a meaning
(ERROR, OK, MUTED) that every verdict, badge and status line keeps, so a red mark reads the same
on every page. Plain strings, no Qt: pyqtgraph pens, QColor and style sheets all take "#rrggbb".
"""

from __future__ import annotations

# the palette
RED = "#c62828"
GREEN = "#2e7d32"
BLUE = "#1565c0"
PURPLE = "#6a1b9a"
ORANGE = "#ef6c00"
AMBER = "#f9a825"
GREY = "#757575"
LIGHT_GREY = "#9e9e9e"  # guide lines (the Lab's knob-change markers)
NOTE_GREY = "#616161"  # small print under a chart's title
LABEL_GREY = "#424242"  # labels drawn on a chart
BORDER_GREY = "#bdbdbd"

# backgrounds
LIGHT_GREEN = "#c8e6c9"  # a token the target accepted, the tuner's best row
LIGHT_RED = "#ffcdd2"
LIGHT_YELLOW = "#fff9c4"
LIGHT_BLUE = "#e3f2fd"

# what they mean
ERROR = RED  # a refusal, a failure, a verdict against
OK = GREEN  # a verdict for: compatible, fits
MUTED = GREY  # unknown, cancelled, stopped
BUSY = AMBER  # starting, loading
WARNING_BACKGROUND = LIGHT_YELLOW
BANNER_BACKGROUNDS = {"error": LIGHT_RED, "warning": LIGHT_YELLOW, "info": LIGHT_BLUE}


def coloured(text: str, colour: str, *, bold: bool = True) -> str:
    """``text`` as rich text in ``colour``; bold, as the pages' verdicts are, unless told otherwise."""
    tag = "b" if bold else "span"
    return f"<{tag} style='color:{colour}'>{text}</{tag}>"


def error_text(text: str, *, bold: bool = True) -> str:
    return coloured(text, ERROR, bold=bold)


def ok_text(text: str) -> str:
    return coloured(text, OK)
