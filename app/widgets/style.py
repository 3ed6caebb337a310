"""The app's colours, in one place, in a light and a dark variant, and rich text in them.

Lines and text use Material Design's darker shades on the light look and its lighter shades on the dark
one; the pages give three of them a meaning (ERROR, OK, MUTED) that every verdict, badge and status line
keeps, so a red mark reads the same on every page. Plain strings, no Qt: pyqtgraph pens, QColor and style
sheets all take "#rrggbb". app.widgets.theme picks the variant from the system's colour scheme and calls
set_variant; code that paints asks current() at the time it paints, so a switch reaches it. The module
constants below are the light variant, for code that needs a colour before any window exists.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Colours:
    name: str  # "light" | "dark"
    red: str
    green: str
    blue: str
    purple: str
    orange: str
    amber: str
    grey: str
    guide: str  # guide lines (the Lab's knob-change markers)
    note: str  # small print under a chart's title
    label: str  # labels drawn on a chart
    border: str
    accepted_background: str  # a token the target accepted, the tuner's best row
    rejected_background: str
    warning_background: str
    info_background: str
    chart_background: str
    chart_foreground: str  # axes, ticks, titles

    # what they mean
    @property
    def error(self) -> str:  # a refusal, a failure, a verdict against
        return self.red

    @property
    def ok(self) -> str:  # a verdict for: compatible, fits
        return self.green

    @property
    def muted(self) -> str:  # unknown, cancelled, stopped
        return self.grey

    @property
    def busy(self) -> str:  # starting, loading
        return self.amber

    @property
    def banner_backgrounds(self) -> dict[str, str]:
        return {"error": self.rejected_background, "warning": self.warning_background, "info": self.info_background}


LIGHT = Colours(
    name="light",
    red="#c62828",
    green="#2e7d32",
    blue="#1565c0",
    purple="#6a1b9a",
    orange="#ef6c00",
    amber="#f9a825",
    grey="#757575",
    guide="#9e9e9e",
    note="#616161",
    label="#424242",
    border="#bdbdbd",
    accepted_background="#c8e6c9",
    rejected_background="#ffcdd2",
    warning_background="#fff9c4",
    info_background="#e3f2fd",
    chart_background="#ffffff",
    chart_foreground="#424242",
)

# Material's 200-300 shades: the same hues, light enough to read on a dark grey
DARK = Colours(
    name="dark",
    red="#ef5350",
    green="#66bb6a",
    blue="#64b5f6",
    purple="#ce93d8",
    orange="#ffa726",
    amber="#ffd54f",
    grey="#9e9e9e",
    guide="#757575",
    note="#bdbdbd",
    label="#e0e0e0",
    border="#616161",
    accepted_background="#1b5e20",
    rejected_background="#5d1f1f",
    warning_background="#4a4216",
    info_background="#16324f",
    chart_background="#1e1e1e",
    chart_foreground="#d0d0d0",
)

_current = LIGHT


def current() -> Colours:
    return _current


def set_variant(colours: Colours) -> None:
    global _current
    _current = colours


# the light variant as constants (see the module's docstring)
RED = LIGHT.red
GREEN = LIGHT.green
BLUE = LIGHT.blue
PURPLE = LIGHT.purple
ORANGE = LIGHT.orange
AMBER = LIGHT.amber
GREY = LIGHT.grey
LIGHT_GREY = LIGHT.guide
NOTE_GREY = LIGHT.note
LABEL_GREY = LIGHT.label
BORDER_GREY = LIGHT.border
LIGHT_GREEN = LIGHT.accepted_background
LIGHT_RED = LIGHT.rejected_background
LIGHT_YELLOW = LIGHT.warning_background
LIGHT_BLUE = LIGHT.info_background
ERROR = LIGHT.error
OK = LIGHT.ok
MUTED = LIGHT.muted
BUSY = LIGHT.busy
WARNING_BACKGROUND = LIGHT.warning_background
BANNER_BACKGROUNDS = LIGHT.banner_backgrounds


def coloured(text: str, colour: str, *, bold: bool = True) -> str:
    """``text`` as rich text in ``colour``; bold, as the pages' verdicts are, unless told otherwise."""
    tag = "b" if bold else "span"
    return f"<{tag} style='color:{colour}'>{text}</{tag}>"


def error_text(text: str, *, bold: bool = True) -> str:
    return coloured(text, _current.error, bold=bold)


def ok_text(text: str) -> str:
    return coloured(text, _current.ok)
