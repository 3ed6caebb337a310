"""The page list on the left of the main window: an icon, the page's name and its shortcut per row.

The shortcut is painted right-aligned in the muted colour by a small delegate, so the list stays a plain
QListWidget (arrow keys, currentRowChanged) and the text of an item stays the page's name. The width
follows the font, not a fixed number of pixels, so the names fit at 125 % and 150 % scaling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QModelIndex, QPersistentModelIndex, QSize, Qt
from PySide6.QtGui import QKeySequence, QPainter, QPalette
from PySide6.QtWidgets import (
    QListWidget,
    QListWidgetItem,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QWidget,
)

from app.widgets.icons import line_icon

SHORTCUT_ROLE = Qt.ItemDataRole.UserRole + 1
ICON_ROLE = Qt.ItemDataRole.UserRole + 2
GAP = 16  # px between a name and its shortcut (before scaling)


@dataclass(frozen=True)
class PageEntry:
    name: str
    icon: str  # resources/icons/<icon>.svg
    shortcut: str  # a QKeySequence string, "Ctrl+1"
    summary: str = ""  # the tooltip: what the page is for

    def shortcut_text(self) -> str:
        return QKeySequence(self.shortcut).toString(QKeySequence.SequenceFormat.NativeText)


class _ShortcutDelegate(QStyledItemDelegate):
    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        super().paint(painter, option, index)
        text = index.data(SHORTCUT_ROLE)
        if not text:
            return
        painter.save()
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.PlaceholderText
        painter.setPen(option.palette.color(role))
        font = painter.font()
        font.setPointSizeF(max(font.pointSizeF() * 0.85, 6.0))
        painter.setFont(font)
        rect = option.rect.adjusted(0, 0, -8, 0)
        painter.drawText(rect, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, text)
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        size = super().sizeHint(option, index)
        extra = option.fontMetrics.horizontalAdvance(index.data(SHORTCUT_ROLE) or "") + GAP
        return QSize(size.width() + extra, int(size.height() * 1.6))  # room to aim a click


class PageNavigation(QListWidget):
    def __init__(self, entries: Sequence[PageEntry], parent: QWidget | None = None):
        super().__init__(parent)
        self.entries = tuple(entries)
        self.setItemDelegate(_ShortcutDelegate(self))
        self.setIconSize(QSize(20, 20))
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        for entry in self.entries:
            item = QListWidgetItem(entry.name)
            item.setData(SHORTCUT_ROLE, entry.shortcut_text())
            item.setData(ICON_ROLE, entry.icon)
            tip = f"{entry.name} ({entry.shortcut_text()})"
            item.setToolTip(f"{tip}: {entry.summary}" if entry.summary else tip)
            self.addItem(item)
        self.recolour()

    def recolour(self) -> None:
        """Draw the icons in the palette's text colour (again after a light/dark switch)."""
        colour = self.palette().color(QPalette.ColorRole.Text).name()
        for row in range(self.count()):
            item = self.item(row)
            item.setIcon(line_icon(item.data(ICON_ROLE), colour))
        self.setFixedWidth(self._wanted_width())

    def _wanted_width(self) -> int:
        option = QStyleOptionViewItem()
        self.initViewItemOption(option)
        option.decorationSize = self.iconSize()
        option.features |= QStyleOptionViewItem.ViewItemFeature.HasDecoration
        delegate = self.itemDelegate()
        rows = (self.model().index(r, 0) for r in range(self.count()))
        widest = max((delegate.sizeHint(option, index).width() for index in rows), default=0)
        return widest + 2 * self.frameWidth() + 12

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.FontChange):
            self.recolour()
