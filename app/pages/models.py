"""The Models page: model pairs to try. Shows the bundled demo pair with a
button that puts it into the Lab."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QPushButton, QVBoxLayout, QWidget


class ModelsPage(QWidget):
    def __init__(self, lab, parent: QWidget | None = None):
        super().__init__(parent)
        self.lab = lab
        col = QVBoxLayout(self)
        col.addWidget(QLabel("<h3>Models</h3>"))
        self.demo_label = QLabel()
        self.demo_label.setWordWrap(True)
        use = QPushButton("Use the demo pair in the Lab")
        use.clicked.connect(self.use_demo_pair)
        col.addWidget(self.demo_label)
        col.addWidget(use)
        col.addStretch(1)
        self.demo_label.setText("The demo pair ships with SpecTune and needs no download.")

    def use_demo_pair(self) -> None:
        from engine.demo import demo_pair

        target, draft = demo_pair()
        self.lab.controls.target.set_path(target)
        self.lab.controls.draft.set_path(draft)
