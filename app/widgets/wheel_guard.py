"""The mouse wheel scrolls the page; it changes a knob only when that knob has the focus.

Qt's spin boxes, combo boxes and sliders take every wheel event over them, focused or not, so scrolling the
Lab's left panel turned whichever knob passed under the pointer (issue 30: 12 of 17 knobs changed on one
notch). One filter, put on every knob of a window once its pages are built: a wheel event over an unfocused
knob goes to the scroll area around it instead, or nowhere when there is none.

On the knobs, not on the application: a Python filter on the application sees every event of every widget
(each paint, each timer), and each must take Python's GIL first. With a background thread holding the GIL
(a header read, the catalog's ranking) each handover waits up to the interpreter's 5 ms switch interval,
and a window's repaint of a few hundred events froze the window for up to 1.6 s (bench/gui_stall.py).
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QObject
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QScrollBar,
    QWidget,
)

_KNOBS = (QAbstractSpinBox, QComboBox, QAbstractSlider)


class WheelGuard(QObject):
    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if event.type() != QEvent.Type.Wheel:
            return False
        knob = _knob_of(obj)
        if knob is None or knob.hasFocus():
            return False
        area = _scroll_area_around(knob)
        if area is not None:
            QCoreApplication.sendEvent(area.verticalScrollBar(), event)
        return True  # the knob keeps its value


def _knob_of(obj: QObject) -> QWidget | None:
    """The knob a wheel event is over: the widget itself, or the knob whose part it is (a spin box's line
    edit); scroll bars are sliders that must keep the wheel."""
    node: QObject | None = obj
    while isinstance(node, QWidget):
        if isinstance(node, _KNOBS) and not isinstance(node, QScrollBar):
            return node
        if isinstance(node, QAbstractScrollArea):  # a combo box's open list, a text box: not a knob
            return None
        node = node.parentWidget()
    return None


def _scroll_area_around(widget: QWidget) -> QAbstractScrollArea | None:
    parent = widget.parentWidget()
    while parent is not None and not isinstance(parent, QAbstractScrollArea):
        parent = parent.parentWidget()
    return parent


def guard_knobs(root: QWidget) -> WheelGuard:
    """Put the guard (one per application) on every knob under root: call it once the knobs exist. A knob
    made later needs a call of its own."""
    app = QApplication.instance()
    assert app is not None, "a QApplication must exist first"
    guard = app.findChild(WheelGuard)
    if guard is None:
        guard = WheelGuard(app)
    for kind in _KNOBS:
        for knob in root.findChildren(kind):
            if not isinstance(knob, QScrollBar):
                knob.installEventFilter(guard)  # a second install of the same filter keeps one
    return guard
