"""Keyboard shortcuts that belong to one page of the main window.

A page's shortcuts (Esc stops, Ctrl+Return starts, ...) should work as soon as
the page is on screen, wherever the focus is: also right after a click in the
page list, where the focus stays for the arrow keys. So they are window-wide,
and the main window enables only those of the page in view; several pages may
then use the same keys without Qt finding them ambiguous.
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
        shortcut.setObjectName("page-shortcut")


def enable_page_shortcuts(pages: Iterable[QWidget], current: QWidget) -> None:
    """Only the page in view answers its keys."""
    for page in pages:
        for shortcut in page.findChildren(QShortcut, "page-shortcut"):
            shortcut.setEnabled(page is current)
