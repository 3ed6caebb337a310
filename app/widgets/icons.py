"""The app's icons: the SpecTune icon and one line icon per page (resources/icons/*.svg, drawn for this app).

The page icons are drawn with stroke="currentColor"; Qt's SVG reader does not know that keyword, so the
colour is written into the SVG text before Qt reads it. That way one file serves the light and the dark
look (the navigation asks again with the palette's text colour when the scheme changes). The images go
through Qt's SVG image plugin, not the QtSvg Python module, which the packaged build leaves out.
"""

from __future__ import annotations

from functools import lru_cache

from PySide6.QtCore import QByteArray
from PySide6.QtGui import QIcon, QPixmap

from engine.core.paths import RESOURCES_DIR

ICONS_DIR = RESOURCES_DIR / "icons"
ICON_PX = 48  # rendered once this large; Qt scales down for the list and keeps it sharp at 150 %


def app_icon() -> QIcon:
    icon = QIcon()
    for name in ("spectune.svg", "spectune.png"):
        path = ICONS_DIR / name
        if path.is_file():
            icon.addFile(str(path))
    return icon


@lru_cache(maxsize=64)
def _svg_text(name: str) -> str:
    return (ICONS_DIR / f"{name}.svg").read_text(encoding="utf-8")


def line_icon(name: str, colour: str) -> QIcon:
    """resources/icons/<name>.svg drawn in ``colour`` ("#rrggbb"); an empty icon when the file is missing."""
    try:
        text = _svg_text(name)
    except OSError:
        return QIcon()
    text = text.replace("currentColor", colour).replace(
        'width="24" height="24"', f'width="{ICON_PX}" height="{ICON_PX}"', 1
    )
    pixmap = QPixmap()
    # the stubs type format as bytes, but PySide6 6.10 takes only a str here (bytes raise ValueError)
    if not pixmap.loadFromData(QByteArray(text.encode("utf-8")), "SVG"):  # type: ignore[call-overload]
        return QIcon()
    return QIcon(pixmap)
