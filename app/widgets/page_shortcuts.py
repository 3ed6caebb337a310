"""Keyboard shortcuts that belong to one page of the main window.

A page's shortcuts (Esc stops, Ctrl+Return starts, ...) should work as soon as
the page is on screen, wherever the focus is: also right after a click in the
page list, where the focus stays for the arrow keys. So they are window-wide.
Qt only matches a shortcut whose parent widget is visible, and the page stack
hides every page but the one in view, so only that page answers its keys and
several pages may use the same ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QWidget


def add_page_shortcuts(page: QWidget, keys: Iterable[tuple[str | QKeySequence.StandardKey | Qt.Key, Callable]]) -> None:
    for key, slot in keys:
        shortcut = QShortcut(QKeySequence(key), page, context=Qt.ShortcutContext.WindowShortcut)
        shortcut.activated.connect(slot)
