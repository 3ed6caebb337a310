"""The main window's pages in their order: name, icon, shortcut and what each is for.

Its own module because two parts of the app need the list and one of them is the window itself: the main
window builds its page list and View menu from it, and the scripted session (app.scripted), which the
window starts for the Start page's demo, walks it to save a picture of every page.
"""

from __future__ import annotations

from app.widgets.navigation import PageEntry

PAGES = (
    PageEntry("Start", "start", "Ctrl+0", "where to begin: a demo run, a pair for this machine, then tune and export"),
    PageEntry("Hardware", "hardware", "Ctrl+1", "GPUs, VRAM, CPU and RAM"),
    PageEntry("Models", "models", "Ctrl+2", "the GGUF files here, downloads, recommendations"),
    PageEntry("Lab", "lab", "Ctrl+3", "run a pair live and move the knobs"),
    PageEntry("Tune", "tune", "Ctrl+4", "let the auto-tuner find the best settings"),
    PageEntry("Export", "export", "Ctrl+5", "the llama-server command, validated"),
    PageEntry("Serve", "serve", "Ctrl+6", "serve the settings to your own tools, watch and retune on their traffic"),
    PageEntry("History", "history", "Ctrl+7", "every run, tune and validation"),
)
PAGE_NAMES = tuple(p.name for p in PAGES)
