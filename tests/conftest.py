"""Shared fixtures: synthetic model pairs (written in well under a second) and engine clients; and the rule that
keeps the fast tier fast (a test that starts a model, llama-server or the engine worker is marked slow)."""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from engine.models.synthetic import CHATML_TEMPLATE, ModelShape, PairSpec, write_pair

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# runs recorded during tests go to a throwaway history, never the user's
os.environ["SPECTUNE_DATA_DIR"] = tempfile.mkdtemp(prefix="spectune-test-data-")
# `python -m testmodels.synthetic` in a test's subprocess finds the test kit wherever pytest was started: the
# project's install holds engine and app only (testmodels stays out of the product)
_ROOT = str(Path(__file__).resolve().parent.parent)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH", "")) if p)

GUI_WAIT = 120_000  # ms; generous: CI machines are small and may be busy

# prompts with some repetition so the n-gram methods find matches
PROMPTS = (
    "def the value of the data is",
    "import self return None for value in list",
    "the model and the draft are in the cache of the target model and the draft",
    "class data: def value(self): return self value def value(self): return",
)


@pytest.fixture(scope="session")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    """A small target/draft pair with greedy acceptance around 0.6-0.8."""
    return write_pair(tmp_path_factory.mktemp("pair"), PairSpec())


@pytest.fixture(scope="session")
def identical_pair(tmp_path_factory) -> tuple[Path, Path]:
    """divergence 0: the draft predicts exactly what the target does."""
    return write_pair(tmp_path_factory.mktemp("pair0"), PairSpec(divergence=0.0))


@pytest.fixture(scope="session")
def incompatible_pair(tmp_path_factory) -> tuple[Path, Path]:
    return write_pair(tmp_path_factory.mktemp("pair_bad_vocab"), PairSpec(), draft_vocab_variant=1)


@pytest.fixture(scope="session")
def chat_pair(tmp_path_factory) -> tuple[Path, Path]:
    """The small pair with a ChatML chat template (and its control tokens) in both files: an instruct model."""
    return write_pair(tmp_path_factory.mktemp("pair_chat"), PairSpec(chat_template=CHATML_TEMPLATE))


@pytest.fixture(scope="session")
def bigger_pair(tmp_path_factory) -> tuple[Path, Path]:
    shape = ModelShape(n_embd=256, n_layer=6, n_head=4, n_head_kv=2, n_ff=640)
    return write_pair(tmp_path_factory.mktemp("pair_big"), PairSpec(shape=shape, dtype="f16"))


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    """The main window on the Lab page, its engine worker started (the GUI tests' common start)."""
    from PySide6.QtCore import QSettings

    from app.main_window import MainWindow

    monkeypatch.setenv("SPECTUNE_CONFIG_DIR", str(tmp_path / "config"))
    w = MainWindow(settings=QSettings(str(tmp_path / "test.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.show()
    w.show_page("Lab")
    with qtbot.waitSignal(w.controller.hello, timeout=GUI_WAIT):
        w.controller.start()
    yield w
    w.close()


@pytest.fixture
def client():
    from engine.runtime.client import EngineClient

    c = EngineClient()
    c.start()
    yield c
    c.close()


@pytest.fixture(autouse=True)
def no_leftover_threads():
    """A test must not leave threads of its own running (reader threads end with their process)."""
    before = set(threading.enumerate())
    yield
    import time

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        extra = [
            t
            for t in threading.enumerate()
            # child-launcher: the one thread that forks every llama-server, for the process's life
            # (engine.llama.child_process)
            if t not in before
            and t.is_alive()
            and not t.name.startswith(("engine-std", "QThread", "Dummy", "child-launcher"))
        ]
        if not extra:
            return
        time.sleep(0.05)
    pytest.fail(f"threads left running: {[t.name for t in extra]}")


def run_registered(register, args: list[str], capsys, **register_kw) -> tuple[int, str, str]:
    """Run one subcommand of a CLI module (its ``register(sub, ...)``) in this process, as
    engine.cli.main would; returns (exit status, stdout, stderr)."""
    parser = argparse.ArgumentParser(prog="spectune")
    register(parser.add_subparsers(dest="command"), **register_kw)
    a = parser.parse_args(args)
    rc = a.func(a)
    out, err = capsys.readouterr()
    return rc, out, err


def own_cache_env(folder: Path) -> dict[str, str]:
    """The environment for a SpecTune subprocess that may measure this CPU (`spectune predict`): its user
    cache in ``folder``, so that a probe taken under the test run's load never becomes this machine's
    figures, and the native runtime already built, so that nothing is built again there."""
    from engine.runtime.native_build import library_path

    return {**os.environ, "SPECTUNE_CACHE_DIR": str(folder), "SPECTUNE_SPECRT": str(library_path())}


# -- the fast tier: `scripts/test.sh --fast` runs pytest -m "not slow" ------------------------------------------
# A test is slow when it starts a model, llama-server, the engine worker (which loads models and runs the CPU
# probe) or SpecTune's command line in a child process. Tests marked server or real_models are slow by what they
# are. Any other test that starts one of these programs fails here, naming what it started, until it is marked
# `pytest.mark.slow`: so the fast tier never quietly grows slow, and the full suite checks the marks.
SLOW_MARKERS = ("server", "real_models")
STARTS_A_MODEL = ("engine.runtime.worker", "engine.measure.server_worker", "engine.cli")
_started: list[str] = []  # what the running test has started


def _what_it_starts(args) -> str | None:
    argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else [str(args)]
    program = Path(argv[0]).name if argv else ""
    if program.startswith("llama-") and {"--help", "--version"} & set(argv[1:]):
        return None  # a binary asked what it is: no server, no model
    if program.startswith("llama-") or program == "spectune":
        return program
    return next((a for a in argv if a in STARTS_A_MODEL), None)


_popen_init = subprocess.Popen.__init__


def _watched_popen_init(self, args, *rest, **kwargs):
    what = _what_it_starts(args)
    if what is not None:
        _started.append(what)
    _popen_init(self, args, *rest, **kwargs)


subprocess.Popen.__init__ = _watched_popen_init  # type: ignore[method-assign]


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(m) for m in SLOW_MARKERS):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _started.clear()  # before any fixture: what a module's or the session's fixture starts counts for this test


@pytest.fixture(autouse=True)
def starts_nothing_unless_marked_slow(request):
    yield
    started = sorted(set(_started))
    if started and request.node.get_closest_marker("slow") is None:
        pytest.fail(
            f"this test started {', '.join(started)} and is not marked slow: mark it @pytest.mark.slow "
            "(or its module's pytestmark), so that scripts/test.sh --fast leaves it out"
        )
