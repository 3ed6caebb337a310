"""The Export page: the llama-server command for the Lab's current settings in
the dialect of the chosen llama-server binary (default: the bundled one),
quoted for bash, PowerShell or cmd, with the pitfalls spelled out; it follows
the knobs as they move. vLLM / SGLang commands are on the CLI (spectune export
--format vllm|sglang), since they need Hugging Face repositories, not GGUF files.
"""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget)

from app.pages.lab_controls import PathPicker
from engine.settings import SettingsError

SHELLS = ("bash", "pwsh", "cmd")


class ExportPage(QWidget):
    def __init__(self, lab, parent: QWidget | None = None):
        super().__init__(parent)
        self.lab = lab
        self.shell = QComboBox()
        self.shell.addItems(SHELLS)
        self.server = PathPicker("llama-server binary (empty: the bundled one)")
        self.command = QPlainTextEdit()
        self.command.setReadOnly(True)
        self.warnings = QLabel()
        self.warnings.setWordWrap(True)
        copy = QPushButton("Copy")
        copy.setToolTip("copy the command to the clipboard")
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.command.toPlainText()))
        col = QVBoxLayout(self)
        col.addWidget(QLabel("<h3>llama-server command</h3>"))
        row = QHBoxLayout()
        row.addWidget(QLabel("shell"))
        row.addWidget(self.shell)
        row.addWidget(QLabel("server"))
        row.addWidget(self.server, 1)
        col.addLayout(row)
        col.addWidget(self.command, 1)
        col.addWidget(self.warnings)
        col.addWidget(copy)
        self.shell.currentTextChanged.connect(self.refresh)
        self.server.changed.connect(self.refresh)
        lab.controls.knobsChanged.connect(self.refresh)
        lab.controls.modelsChanged.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        from engine.export import ExportError, export_llama_server
        from engine.server_dialect import DialectError

        c = self.lab.controls
        try:
            load = c.load_settings()
            exported = export_llama_server(load, c.spec_settings(), c.sampling_settings(), self.server.path())
        except (SettingsError, ExportError, DialectError, OSError) as exc:
            self.command.setPlainText("")
            self.warnings.setText(f"Nothing to export: {exc}")
            return
        self.command.setPlainText(exported.line(self.shell.currentText()))
        notes = [f"dialect: {exported.dialect}"] + exported.warnings
        self.warnings.setText("<br>".join(f"• {n}" for n in notes))
