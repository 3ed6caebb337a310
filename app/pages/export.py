"""The Export page: the llama-server command for the Lab's current settings,
updated as the knobs move, ready to copy. (Dialect detection from a binary's
--help, PowerShell / cmd quoting and validation against a real server are
issue #6 and extend engine.export.)"""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from engine.export import bash_command, llama_server_argv
from engine.settings import SettingsError


class ExportPage(QWidget):
    def __init__(self, lab, parent: QWidget | None = None):
        super().__init__(parent)
        self.lab = lab
        self.command = QPlainTextEdit()
        self.command.setReadOnly(True)
        self.note = QLabel()
        self.note.setWordWrap(True)
        copy = QPushButton("Copy")
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.command.toPlainText()))
        col = QVBoxLayout(self)
        col.addWidget(QLabel("<h3>llama-server command (bash)</h3>"))
        col.addWidget(self.command, 1)
        row = QHBoxLayout()
        row.addWidget(self.note, 1)
        row.addWidget(copy)
        col.addLayout(row)
        lab.controls.knobsChanged.connect(self.refresh)
        lab.controls.modelsChanged.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        c = self.lab.controls
        try:
            from engine.llama_install import server_path

            server = str(server_path())
        except Exception:  # the command is still useful with a bare name
            server = "llama-server"
        try:
            load = c.load_settings()
            argv = llama_server_argv(load, c.spec_settings(), c.sampling_settings(), server)
        except SettingsError as exc:
            self.command.setPlainText("")
            self.note.setText(f"Nothing to export yet: {exc}.")
            return
        self.command.setPlainText(bash_command(argv))
        self.note.setText("Same models, context, method, K and sampling as the Lab. -np 1 keeps one slot, as the Lab "
                          "measures it.")
