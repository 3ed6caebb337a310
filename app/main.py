"""``python -m app`` / ``spectune gui``: the desktop app.

Options: --selftest (start the window and the engine, load the demo pair, run a
short generation, exit 0 when it worked; used for packaged builds),
--screenshot DIR (save a PNG of every page after a short demo run).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spectune gui")
    ap.add_argument("--selftest", action="store_true", help="run a short headless check and exit")
    ap.add_argument("--screenshot", metavar="DIR", help="save a PNG of each page after a short demo run")
    ap.add_argument("--demo", action="store_true", help="load the demo pair and start a run at once")
    a = ap.parse_args(argv)

    from app.platform_check import exit_if_qt_cannot_start

    exit_if_qt_cannot_start()  # before Qt loads its platform plugin, which would only say "could not load"
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from app.widgets.icons import app_icon

    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)  # the GUI's application, whichever made it
    app.setApplicationName("SpecTune")
    app.setDesktopFileName("spectune")  # Wayland shells match the window to spectune.desktop (its icon)
    app.setWindowIcon(app_icon())
    window = MainWindow()
    window.show()
    window.controller.start()
    if a.selftest or a.screenshot:
        from app.scripted import ScriptedSession

        ScriptedSession(window, screenshot_dir=a.screenshot).begin()
    elif a.demo:
        window.run_demo()
    return app.exec()


if __name__ == "__main__":
    raise SystemExit(main())
