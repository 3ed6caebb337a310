"""Light or dark, following the system's colour scheme (Qt 6's QStyleHints.colorScheme), charts included.

ThemeFollower reads the scheme at start and again whenever the system changes it, and then:
  - picks app.widgets.style's variant, which code that paints later asks for (style.current());
  - gives the application a dark palette (Fusion style) where the platform did not darken it itself, and
    puts the original palette and style back for the light look;
  - re-colours every pyqtgraph chart already on screen: background, axes, titles, legends, and each
    curve, bar and marker from its light colour to the same role's dark one (and back), so the charts
    need no re-theming code of their own;
  - emits changed(Colours) for widgets that draw with a style sheet (banners).
SPECTUNE_COLOR_SCHEME=light|dark overrides the system (screenshots of both looks, a user's preference).
"""

from __future__ import annotations

import os
from dataclasses import fields

import pyqtgraph as pg
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QPalette, QPen
from PySide6.QtWidgets import QApplication, QStyleFactory

from app.widgets import style

# every colour of one variant to the same role's colour in the other
_COLOUR_FIELDS = [f.name for f in fields(style.Colours) if f.name != "name"]
_TO = {
    "dark": {getattr(style.LIGHT, f).lower(): getattr(style.DARK, f) for f in _COLOUR_FIELDS},
    "light": {getattr(style.DARK, f).lower(): getattr(style.LIGHT, f) for f in _COLOUR_FIELDS},
}
_TO["dark"].update({"#000000": style.DARK.chart_foreground, "#ffffff": style.DARK.chart_background})


def dark_palette() -> QPalette:
    p = QPalette()
    roles = QPalette.ColorRole
    for role, colour in (
        (roles.Window, "#2b2b2b"),
        (roles.WindowText, "#e6e6e6"),
        (roles.Base, "#1e1e1e"),
        (roles.AlternateBase, "#262626"),
        (roles.ToolTipBase, "#3a3a3a"),
        (roles.ToolTipText, "#f0f0f0"),
        (roles.PlaceholderText, "#9a9a9a"),
        (roles.Text, "#e6e6e6"),
        (roles.Button, "#353535"),
        (roles.ButtonText, "#e6e6e6"),
        (roles.BrightText, "#ff6e6e"),
        (roles.Light, "#4a4a4a"),
        (roles.Midlight, "#3f3f3f"),
        (roles.Mid, "#2f2f2f"),
        (roles.Dark, "#1a1a1a"),
        (roles.Shadow, "#000000"),
        (roles.Highlight, "#2f6fb3"),
        (roles.HighlightedText, "#ffffff"),
        (roles.Link, style.DARK.blue),
    ):
        p.setColor(role, QColor(colour))
    disabled = QPalette.ColorGroup.Disabled
    for role in (roles.WindowText, roles.Text, roles.ButtonText):
        p.setColor(disabled, role, QColor("#7a7a7a"))
    return p


def _is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


class ThemeFollower(QObject):
    changed = Signal(object)  # style.Colours

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        app = QApplication.instance()
        assert isinstance(app, QApplication), "a QApplication must exist first"
        self._system_palette = QPalette(app.palette())
        self._system_style = app.style().name()
        self._we_darkened = False
        QGuiApplication.styleHints().colorSchemeChanged.connect(self.follow_system)
        self.follow_system()

    def scheme(self) -> Qt.ColorScheme:
        forced = os.environ.get("SPECTUNE_COLOR_SCHEME", "").lower()
        if forced in ("dark", "light"):
            return Qt.ColorScheme.Dark if forced == "dark" else Qt.ColorScheme.Light
        return QGuiApplication.styleHints().colorScheme()

    def follow_system(self, *_args) -> None:
        self.apply(self.scheme())

    def apply(self, scheme: Qt.ColorScheme) -> None:
        app = QApplication.instance()
        assert isinstance(app, QApplication), "a QApplication must exist first"
        dark = scheme == Qt.ColorScheme.Dark
        if scheme == Qt.ColorScheme.Unknown:
            dark = _is_dark(self._system_palette)  # no hint (offscreen, old desktops): the palette tells
        if dark and not _is_dark(app.palette()):
            # the platform kept a light palette (Fusion on Linux, offscreen): darken it ourselves
            app.setStyle(QStyleFactory.create("Fusion"))
            app.setPalette(dark_palette())
            self._we_darkened = True
        elif not dark and self._we_darkened:
            app.setStyle(QStyleFactory.create(self._system_style) or QStyleFactory.create("Fusion"))
            app.setPalette(self._system_palette)
            self._we_darkened = False
        colours = style.DARK if dark else style.LIGHT
        if colours is style.current() and not self._charts_need(colours):
            return
        style.set_variant(colours)
        pg.setConfigOptions(background=colours.chart_background, foreground=colours.chart_foreground)
        for widget in app.allWidgets():
            if isinstance(widget, pg.GraphicsView):
                recolour_chart(widget, colours)
        self.changed.emit(colours)

    @staticmethod
    def _charts_need(colours: style.Colours) -> bool:
        return pg.getConfigOption("background") != colours.chart_background


def _swap(colour: QColor, colours: style.Colours) -> QColor:
    mapped = _TO[colours.name].get(colour.name().lower())
    if mapped is None:
        return colour
    out = QColor(mapped)
    out.setAlpha(colour.alpha())
    return out


def _swapped_pen(pen: QPen, colours: style.Colours) -> QPen:
    pen = QPen(pen)
    pen.setColor(_swap(pen.color(), colours))
    return pen


def recolour_chart(view: pg.GraphicsView, colours: style.Colours) -> None:
    """One pyqtgraph view in the other variant's colours, item by item."""
    view.setBackground(colours.chart_background)
    fg = colours.chart_foreground
    for item in view.scene().items():
        if isinstance(item, pg.AxisItem):
            item.setPen(pg.mkPen(fg))
            item.setTextPen(pg.mkPen(fg))
            if item.label is not None:
                item.labelStyle["color"] = fg
                item._updateLabel()
        elif isinstance(item, pg.LabelItem):
            item.setAttr("color", fg)
            item.setText(item.text)
        elif isinstance(item, pg.LegendItem):
            item.setLabelTextColor(fg)
        elif isinstance(item, pg.PlotCurveItem):
            item.setPen(_swapped_pen(item.opts["pen"], colours))
        elif isinstance(item, pg.PlotDataItem):
            pen = item.opts.get("pen")
            if pen is not None:
                item.setPen(_swapped_pen(pg.mkPen(pen), colours))
            brush = item.opts.get("symbolBrush")
            if brush is not None:
                item.setSymbolBrush(pg.mkBrush(_swap(pg.mkBrush(brush).color(), colours)))
        elif isinstance(item, pg.BarGraphItem):
            brush = item.opts.get("brush")
            if brush is not None:
                item.setOpts(brush=pg.mkBrush(_swap(pg.mkBrush(brush).color(), colours)))
        elif isinstance(item, pg.InfiniteLine):
            item.setPen(_swapped_pen(item.pen, colours))
            if item.label is not None:
                item.label.setColor(_swap(item.label.color, colours))
