"""The desktop app explains a system that cannot show its window, before Qt gets to fail: a real
`python -m app` in a subprocess, pointed at a library that does not exist (SPECTUNE_XCB_LIBRARIES)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.platform_check import EXIT_PLATFORM, XCB_LIBRARIES

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the check is for Linux desktops")


def start_app(**env_changes: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QT_", "SPECTUNE_XCB"))}
    for key in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_SESSION_TYPE"):
        env.pop(key, None)
    env.update({k: v for k, v in env_changes.items() if v is not None})
    return subprocess.run(
        [sys.executable, "-m", "app", "--selftest"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_a_missing_xcb_library_names_the_package_to_install():
    done = start_app(
        DISPLAY=":97",
        SPECTUNE_XCB_LIBRARIES="libc.so.6=libc6,glibc;libspectune-fake-cursor.so.0=libfake-cursor0,fake-cursor",
    )
    assert done.returncode == EXIT_PLATFORM, done.stderr
    assert "libspectune-fake-cursor.so.0" in done.stderr and "libc.so.6" not in done.stderr
    assert "sudo apt install libfake-cursor0" in done.stderr
    assert "sudo dnf install fake-cursor" in done.stderr
    assert "Could not load the Qt platform plugin" not in done.stderr  # Qt never got that far


def test_xcb_chosen_explicitly_is_checked_too():
    done = start_app(DISPLAY=":97", QT_QPA_PLATFORM="xcb", SPECTUNE_XCB_LIBRARIES="libspectune-fake.so.1=libfake1,fake")
    assert done.returncode == EXIT_PLATFORM and "sudo apt install libfake1" in done.stderr


def test_without_a_display_the_headless_demo_is_named():
    done = start_app()
    assert done.returncode == EXIT_PLATFORM
    assert "spectune demo" in done.stderr and "display" in done.stderr


def test_every_listed_library_has_both_package_names():
    for library in XCB_LIBRARIES:
        assert library.soname.startswith("lib") and ".so." in library.soname
        assert library.debian and library.fedora
