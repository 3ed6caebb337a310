"""Light and dark: the window follows the system's colour scheme, charts included, and switches live."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication, QPalette  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.main_window import MainWindow  # noqa: E402
from app.widgets import style  # noqa: E402


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPECTUNE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("SPECTUNE_COLOR_SCHEME", raising=False)
    w = MainWindow(settings=QSettings(str(tmp_path / "theme.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.show()
    yield w
    w.theme.apply(Qt.ColorScheme.Light)  # the next test's QApplication is this one: leave it light
    w.close()


def window_is_dark() -> bool:
    return QApplication.instance().palette().color(QPalette.ColorRole.Window).lightness() < 128


def test_dark_and_back_reaches_palette_charts_and_text(qtbot, window):
    charts = window.lab.charts
    window.theme.apply(Qt.ColorScheme.Dark)
    assert style.current() is style.DARK and window_is_dark()
    assert charts.view.backgroundBrush().color().name() == style.DARK.chart_background
    assert charts.c_tps.opts["pen"].color().name() == style.DARK.blue
    assert charts.p_tps.getAxis("left").textPen().color().name() == style.DARK.chart_foreground
    tune_view = window.tune.charts.view if hasattr(window.tune, "charts") else None
    if tune_view is not None:
        assert tune_view.backgroundBrush().color().name() == style.DARK.chart_background
    assert "#ef5350" in style.error_text("x")  # text coloured from now on uses the dark variant
    window.theme.apply(Qt.ColorScheme.Light)
    assert style.current() is style.LIGHT and not window_is_dark()
    assert charts.view.backgroundBrush().color().name() == style.LIGHT.chart_background
    assert charts.c_tps.opts["pen"].color().name() == style.LIGHT.blue


def test_the_system_scheme_is_followed_live(qtbot, window):
    hints = QGuiApplication.styleHints()
    hints.setColorScheme(Qt.ColorScheme.Dark)
    try:
        if hints.colorScheme() != Qt.ColorScheme.Dark:
            pytest.skip("this platform plugin does not take a requested colour scheme")
        qtbot.waitUntil(lambda: style.current() is style.DARK, timeout=5000)
        assert window.lab.charts.view.backgroundBrush().color().name() == style.DARK.chart_background
    finally:
        hints.unsetColorScheme()


@pytest.mark.slow
def test_a_forced_scheme_wins(qtbot, window, monkeypatch):
    monkeypatch.setenv("SPECTUNE_COLOR_SCHEME", "dark")
    window.theme.follow_system()
    assert style.current() is style.DARK and window_is_dark()
