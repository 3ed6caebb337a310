"""The wheel over an unfocused knob scrolls the panel, not the knob (app.widgets.wheel_guard; issue 30 #1)."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QPoint, QPointF, Qt  # noqa: E402
from PySide6.QtGui import QWheelEvent  # noqa: E402
from PySide6.QtWidgets import (  # noqa: E402
    QApplication,
    QComboBox,
    QScrollArea,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.widgets.wheel_guard import guard_knobs  # noqa: E402


def _wheel(widget: QWidget, notches: int = -1) -> None:
    """One wheel notch down (negative) over the widget's centre, as the mouse sends it."""
    centre = QPointF(widget.width() / 2, widget.height() / 2)
    event = QWheelEvent(
        centre,
        QPointF(widget.mapToGlobal(QPoint(int(centre.x()), int(centre.y())))),
        QPoint(0, 0),
        QPoint(0, 120 * notches),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)


def test_an_unfocused_knob_keeps_its_value_and_the_panel_scrolls(qtbot):
    area, panel = QScrollArea(), QWidget()
    layout = QVBoxLayout(panel)
    spin, combo, slider = QSpinBox(), QComboBox(), QSlider(Qt.Orientation.Horizontal)
    spin.setRange(0, 100)
    spin.setValue(50)
    combo.addItems(["a", "b", "c"])
    combo.setCurrentIndex(1)
    slider.setRange(0, 100)
    slider.setValue(50)
    for w in (spin, combo, slider):
        layout.addWidget(w)
    layout.addSpacing(3000)  # taller than the area: there is something to scroll
    area.setWidget(panel)
    assert guard_knobs(area) is guard_knobs(area)  # one guard per application
    area.resize(300, 200)
    qtbot.addWidget(area)
    area.show()
    qtbot.waitExposed(area)
    bar = area.verticalScrollBar()
    for knob in (spin, combo, slider):
        before, scrolled = bar.value(), _value(knob)
        _wheel(knob)
        assert _value(knob) == scrolled, type(knob).__name__
        assert bar.value() > before, type(knob).__name__
    # focused, the knob takes the wheel as Qt made it to
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus)
    _wheel(spin)
    assert spin.value() == 49


def _value(knob) -> int:
    return knob.currentIndex() if isinstance(knob, QComboBox) else knob.value()


@pytest.mark.slow
def test_every_knob_of_the_main_window_is_guarded(window, qtbot):
    """The guard sits on each knob (not on the application, where every event would wait for Python's GIL):
    the Lab's K knob, unfocused under the wheel, keeps its value."""
    k = window.lab.controls.k
    window.lab.controls.setFocus()
    before = k.value()
    assert 0 < before < k.maximum()  # room to move either way, unguarded
    _wheel(k)
    assert k.value() == before and not k.hasFocus()
