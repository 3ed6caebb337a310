"""SpecTune's desktop app (PySide6). The engine work lives in engine/; the app shows it.

main             ``python -m app`` / ``spectune gui``: the desktop app's entry
platform_check   before Qt starts: will its platform plugin load here, and if not what to install
main_window      the main window: the page list, the pages and the status bar
page_list        the pages by name, in order, with their shortcuts
session          the Lab session the pages share: the model pair, the knobs and the prompts
engine_controller  the GUI's one handle on the engine worker
jobs             one measuring job at a time
quiet_wait       a measurement waits until the app's own computing work is done
background       a thread that runs one engine function for a page, its result back by signal
header_reads     model files' headers read off the GUI thread, for every page that needs them
scripted         a short scripted session on the demo pair (--selftest, screenshots)
demo_run         the Start page's demo: baseline, the quick check, then a live run with its best
settings_store   the app's settings, an INI file in the platformdirs config folder
gui_gc           Python's cycle collector, run in the GUI thread only
gil_handover     background threads hand the GUI thread Python's GIL within a millisecond
pages            the main window's pages
widgets          widgets and look the pages share

Work that must not hold the GUI thread runs in one of three ways, each for its own case:

- engine_controller: the engine worker, a child process, for anything that loads models. llama.cpp can abort
  its process (an assert, CUDA out of memory), and the GUI must outlive that.
- background.BackgroundJob: a Python thread for one engine function that returns (a scan, a pre-load check, a
  download), with progress, done and failed signals. A function that parses or computes for long is sent on
  to a child process by the engine itself (engine.core.child_call: the ranking, header reads), so that the
  thread does not hold the GIL the GUI thread needs.
- a QThread subclass (pages/tune/runner.py, pages/export/runner.py): for a long job with its own stop flag and
  several kinds of signals (a tune, a validation), which drives worker processes and llama-server itself.
"""
