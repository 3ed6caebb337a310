"""SpecTune's desktop app (PySide6). The engine work lives in engine/; the app shows it.

main             ``python -m app`` / ``spectune gui``: the desktop app's entry
platform_check   before Qt starts: will its platform plugin load here, and if not what to install
main_window      the main window: the page list, the pages and the status bar
page_list        the pages by name, in order, with their shortcuts
session          the Lab session the pages share: the model pair, the knobs and the prompts
engine_controller  the GUI's one handle on the engine worker
jobs             one measuring job at a time
background       a thread that runs one engine function for a page, its result back by signal
header_reads     model files' headers read off the GUI thread, for every page that needs them
scripted         a short scripted session on the demo pair (--selftest, screenshots)
demo_run         the Start page's demo: baseline, the quick check, then a live run with its best
settings_store   the app's settings, an INI file in the platformdirs config folder
gui_gc           Python's cycle collector, run in the GUI thread only
gil_handover     background threads hand the GUI thread Python's GIL within a millisecond
pages            the main window's pages
widgets          widgets and look the pages share
"""
