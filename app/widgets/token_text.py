"""Streamed output text; tokens that came from accepted drafts are coloured.

Text arrives in pieces tagged accepted / not accepted (engine.measure.live.take_text)
and is appended by the page's slow timer (~4 Hz), so it stays readable and
the document is not reformatted per token.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QPlainTextEdit, QWidget

from app.widgets import style


class TokenText(QPlainTextEdit):
    def __init__(self, parent: QWidget | None = None, max_blocks: int = 5000, max_chars: int = 20000):
        super().__init__(parent)
        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)  # a read-only log: an undo stack would only keep every insert alive
        self.setMaximumBlockCount(max_blocks)
        self.setPlaceholderText(
            "generated text appears here; green = tokens proposed by the draft and accepted by the target"
        )
        self._plain = QTextCharFormat()
        self._accepted = QTextCharFormat()
        self.accepted_chars = 0
        self.max_chars = max_chars  # a long single-line block re-lays out on every insert: keep it bounded

    def append_pieces(self, pieces: list[tuple[str, bool]]) -> None:
        if not pieces:
            return
        self._accepted.setBackground(QColor(style.current().accepted_background))  # light or dark, as now
        cursor = self.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        # merge runs of the same colour: one insert per run
        run_text, run_acc = "", pieces[0][1]
        for text, accepted in pieces:
            if accepted != run_acc and run_text:
                cursor.insertText(run_text, self._accepted if run_acc else self._plain)
                run_text = ""
            run_acc = accepted
            run_text += text
            if accepted:
                self.accepted_chars += len(text)
        if run_text:
            cursor.insertText(run_text, self._accepted if run_acc else self._plain)
        excess = self.document().characterCount() - self.max_chars
        if excess > self.max_chars // 4:
            trim = QTextCursor(self.document())
            trim.setPosition(excess, QTextCursor.MoveMode.KeepAnchor)
            trim.removeSelectedText()
            cursor.movePosition(QTextCursor.MoveOperation.End)
        self.setTextCursor(cursor)
        self.ensureCursorVisible()

    def clear_text(self) -> None:
        self.clear()
        self.accepted_chars = 0
