"""Before Qt starts: will its platform plugin load here? If not, say what to install, and exit.

Qt's xcb plugin (X11, and Wayland desktops that fall back to XWayland) needs system libraries that a
desktop may not have: Ubuntu does not install libxcb-cursor0, which Qt 6.5+ needs, and without it
Qt only prints "Could not load the Qt platform plugin xcb". Each library is tried with dlopen (as Qt
will) and a missing one is named with the package that brings it on Debian/Ubuntu and on Fedora.
With no display at all the GUI cannot start anywhere, and the headless `spectune demo` is the way.

No Qt import here: this runs before PySide6 loads anything.
SPECTUNE_XCB_LIBRARIES replaces the list ("soname=debian-package,fedora-package;..."), which the
tests use to point the check at a library that does not exist.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass

EXIT_PLATFORM = 3  # the GUI cannot start on this system; the message says why


@dataclass(frozen=True)
class SystemLibrary:
    soname: str
    debian: str  # apt package (Debian, Ubuntu)
    fedora: str  # dnf package (Fedora, RHEL)


# what Qt 6's xcb platform plugin links (libqxcb.so and libQt6XcbQpa.so), beyond libc and libxcb itself
XCB_LIBRARIES = (
    SystemLibrary("libxcb-cursor.so.0", "libxcb-cursor0", "xcb-util-cursor"),
    SystemLibrary("libxkbcommon-x11.so.0", "libxkbcommon-x11-0", "libxkbcommon-x11"),
    SystemLibrary("libxkbcommon.so.0", "libxkbcommon0", "libxkbcommon"),
    SystemLibrary("libxcb-icccm.so.4", "libxcb-icccm4", "xcb-util-wm"),
    SystemLibrary("libxcb-image.so.0", "libxcb-image0", "xcb-util-image"),
    SystemLibrary("libxcb-keysyms.so.1", "libxcb-keysyms1", "xcb-util-keysyms"),
    SystemLibrary("libxcb-render-util.so.0", "libxcb-render-util0", "xcb-util-renderutil"),
    SystemLibrary("libxcb-randr.so.0", "libxcb-randr0", "libxcb"),
    SystemLibrary("libxcb-shape.so.0", "libxcb-shape0", "libxcb"),
    SystemLibrary("libxcb-xkb.so.1", "libxcb-xkb1", "libxcb"),
    SystemLibrary("libX11-xcb.so.1", "libx11-xcb1", "libX11-xcb"),
    SystemLibrary("libfontconfig.so.1", "libfontconfig1", "fontconfig"),
    SystemLibrary("libEGL.so.1", "libegl1", "libglvnd-egl"),
)


def xcb_libraries() -> tuple[SystemLibrary, ...]:
    spec = os.environ.get("SPECTUNE_XCB_LIBRARIES")
    if spec is None:
        return XCB_LIBRARIES
    libraries = []
    for entry in filter(None, (e.strip() for e in spec.split(";"))):
        soname, _, packages = entry.partition("=")
        debian, _, fedora = packages.partition(",")
        libraries.append(SystemLibrary(soname, debian or soname, fedora or debian or soname))
    return tuple(libraries)


def missing_libraries(libraries: tuple[SystemLibrary, ...]) -> list[SystemLibrary]:
    missing = []
    for library in libraries:
        try:
            ctypes.CDLL(library.soname)
        except OSError:
            missing.append(library)
    return missing


def uses_xcb(env: os._Environ | dict) -> bool:
    platform = env.get("QT_QPA_PLATFORM", "")
    if platform:
        return platform.split(":")[0].split(";")[0] == "xcb"
    # unset: on a Wayland session Qt 6 takes its wayland plugin, elsewhere xcb
    return not (env.get("WAYLAND_DISPLAY") and env.get("XDG_SESSION_TYPE") == "wayland")


def problem(env: os._Environ | dict | None = None) -> str | None:
    """Why the GUI cannot start here, with what to do; None when nothing is in the way (or we cannot tell)."""
    env = os.environ if env is None else env
    if not sys.platform.startswith("linux"):
        return None
    platform = env.get("QT_QPA_PLATFORM", "")
    if platform and not platform.startswith("xcb"):
        return None  # offscreen, wayland, vnc...: the user chose, Qt reports its own problems
    if not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        return (
            "SpecTune's window needs a display, and there is none here (neither DISPLAY nor WAYLAND_DISPLAY is set).\n"
            "The headless path runs the same session on the demo pair in the terminal:\n"
            "    spectune demo\n"
            "(or `bash scripts/run.sh demo`; over SSH, `ssh -X` brings the window to your screen)."
        )
    if not uses_xcb(env):
        return None
    missing = missing_libraries(xcb_libraries())
    if not missing:
        return None
    debian = " ".join(dict.fromkeys(lib.debian for lib in missing))
    fedora = " ".join(dict.fromkeys(lib.fedora for lib in missing))
    names = ", ".join(lib.soname for lib in missing)
    return (
        f"Qt's X11 platform plugin (xcb) cannot load: this system lacks {names}.\n"
        "Install it, then start SpecTune again:\n"
        f"    Debian / Ubuntu:  sudo apt install {debian}\n"
        f"    Fedora / RHEL:    sudo dnf install {fedora}\n"
        "Meanwhile `spectune demo` runs the demo session headless, in the terminal."
    )


def exit_if_qt_cannot_start() -> None:
    message = problem()
    if message is not None:
        print(f"spectune gui: {message}", file=sys.stderr)
        raise SystemExit(EXIT_PLATFORM)
