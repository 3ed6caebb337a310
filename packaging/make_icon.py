"""Renders packaging/icons/spectune.svg to the PNG (Linux, .desktop) and ICO (Windows) icons.

    python packaging/make_icon.py [--size 256]

Uses QtSvg from PySide6-Essentials, headless (offscreen platform).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ICONS = Path(__file__).resolve().parent / "icons"


def render(svg: Path, size: int):
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"make_icon: Qt cannot read {svg}")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    return image


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=256)
    a = ap.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # painting wants one
    image = render(ICONS / "spectune.svg", a.size)
    for name in ("spectune.png", "spectune.ico"):
        if not image.save(str(ICONS / name)):
            raise SystemExit(f"make_icon: could not write {ICONS / name}")
        print(ICONS / name)
    del app
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
