"""What the bundle leaves out of what PyInstaller's Qt hooks collect.

The hooks take every plugin of each Qt module in use, and then every library
those plugins link. SpecTune is a widgets app with an English UI, so it drops:
QML and Quick, translations, the embedded-Linux platforms (eglfs, linuxfb, vnc,
Vulkan KHR display), image formats it never reads, the network, TLS and TUIO
touch plugins, and the GTK3 platform theme. That theme alone links GTK's whole
stack (pango, cairo, atk, gdk-pixbuf, ...), which PyInstaller would copy from the
build machine, where a copy that differs from the desktop's own GTK is a common
cause of crashes. Qt falls back to its own dialogs and the xdg-desktop-portal
theme. QtSvg's library and plugins stay: desktop icon themes are SVG, and the
Wayland adwaita window decorations link QtSvg.

Then ``prune_orphans`` removes the top-level shared libraries that only the
dropped pieces needed, and ``strip_debug_info`` drops the debug sections that a
self-built Python (pyenv, for one) leaves in libpython and its extension
modules (about 25 MB; symbols stay, so tracebacks and crash reports still name
functions).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

DROP_PATH_PARTS = (
    "/qml/",
    "/translations/",
    "plugins/qmltooling/",
    "plugins/qmllint/",
    "plugins/designer/",
    "plugins/sqldrivers/",
    "plugins/networkinformation/",
    "plugins/tls/",
    "plugins/egldeviceintegrations/",
    "plugins/wayland-graphics-integration-server/",
    "plugins/platformthemes/libqgtk3",
    "plugins/generic/libqtuiotouchplugin",
    "plugins/platforms/libqeglfs",
    "plugins/platforms/libqlinuxfb",
    "plugins/platforms/libqvnc",
    "plugins/platforms/libqminimalegl",
    "plugins/platforms/libqvkkhrdisplay",
    "plugins/imageformats/libqpdf",
    "plugins/imageformats/libqtiff",
    "plugins/imageformats/libqwebp",
    "plugins/imageformats/libqicns",
    "plugins/imageformats/libqtga",
    "plugins/imageformats/libqwbmp",
)
# Qt libraries of modules the app does not use (they arrive with plugins or with PySide6's own library)
DROP_QT_LIBS = (
    "Pdf",
    "Qml",
    "Quick",
    "Network",
    "Sql",
    "Test",
    "Help",
    "Xml",
    "Concurrent",
    "Designer",
    "VirtualKeyboard",
    "EglFSDeviceIntegration",
    "EglFsKmsSupport",
)


def _dest(entry) -> str:
    return entry[0].replace("\\", "/")


def _base(dest: str) -> str:
    return dest.rsplit("/", 1)[-1]


def is_dropped(dest: str) -> bool:
    dest = "/" + dest.replace("\\", "/")
    if "/PySide6/" in dest and any(part in dest for part in DROP_PATH_PARTS):
        return True
    base = _base(dest)
    return any(base.startswith((f"libQt6{name}", f"Qt6{name}")) for name in DROP_QT_LIBS)


def split_unused_qt(toc: Iterable) -> tuple[list, list]:
    """(kept, dropped) entries of a PyInstaller TOC."""
    kept, dropped = [], []
    for e in toc:
        (dropped if is_dropped(_dest(e)) else kept).append(e)
    return kept, dropped


def _is_dependency_lib(dest: str) -> bool:
    """A shared library PyInstaller put at the bundle's top because something linked it."""
    return "/" not in dest and dest.startswith("lib") and ".so" in dest


def _closure(sources: Iterable[str], libs: dict, needed: Callable[[str], Iterable[str]]) -> set[str]:
    reached: set[str] = set()
    todo = list(sources)
    while todo:
        for name in needed(todo.pop()):
            if name in libs and name not in reached:
                reached.add(name)
                todo.append(libs[name][1])
    return reached


def prune_orphans(kept: list, dropped: list, needed: Callable[[str], Iterable[str]]) -> tuple[list, list[str]]:
    """(entries to keep, names removed): the top-level libraries that only dropped entries needed.

    Only what the dropped entries pulled in is a candidate, so a library that is
    at the top for another reason (libpython, a library found for ctypes) stays.
    """
    libs = {_dest(e): e for e in kept if _is_dependency_lib(_dest(e))}
    pulled = _closure([e[1] for e in dropped], libs, needed)
    roots = [e for e in kept if _dest(e) not in pulled]
    still_needed = _closure([e[1] for e in roots], libs, needed)
    removed = sorted(pulled - still_needed)
    return [e for e in kept if _dest(e) not in removed], removed


def elf_needed(path: str) -> list[str]:
    """NEEDED names of a binary, through PyInstaller's own reader (the spec's venv has it)."""
    from PyInstaller.depend.bindepend import get_imports

    try:
        return [name for name, _ in get_imports(path)]
    except Exception:  # not a binary PyInstaller can read (a data file): it needs nothing
        return []


def strip_debug_info(toc: list, under: str, workdir: Path) -> tuple[list, int]:
    """(TOC, bytes saved): binaries from the folder ``under`` replaced by copies without debug sections.

    Only those: other wheels' libraries are left as their authors built them.
    Without binutils' strip the TOC comes back unchanged.
    """
    strip = shutil.which("strip")
    if strip is None:
        return toc, 0
    out, saved = [], 0
    for dest, src, typecode in toc:
        if typecode in ("BINARY", "EXTENSION") and str(src).startswith(under):
            copy = workdir / dest
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, copy)
            if subprocess.run([strip, "--strip-debug", str(copy)], capture_output=True).returncode == 0:
                saved += Path(src).stat().st_size - copy.stat().st_size
                src = str(copy)
        out.append((dest, src, typecode))
    return out, saved
