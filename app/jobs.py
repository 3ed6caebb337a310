"""One measuring job at a time.

A tune and a validation each measure speed with an engine of their own, and the Lab measures with
its worker: two of them on one machine would each measure the other's load, and on a GPU two copies
of a pair may not fit. So the pages ask here before they start. A tune and a validation refuse to
start beside each other, and the Lab refuses to load or run beside either; the Lab in turn gives
way to them (make_room): its run is stopped, a load under way on the GPU is cancelled and its GPU
copy of the pair is freed. What was done comes back as notes for the user.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from app.engine_controller import CRASHED, EngineController

LAB = "lab"  # the name the Lab asks with


class LabRun(Protocol):
    """What the coordinator needs of the Lab page."""

    mode: str  # idle | loading | running | baseline | stopping

    def stop(self) -> None: ...


@dataclass(frozen=True)
class _Job:
    running: Callable[[], bool]
    busy: str  # said to whoever must wait: "a tune is running on the Tune page"
    job: str  # "tune": "... may slow the tune's first measurements"
    whose: str  # whose copy of the pair needs the room: "the tune's"


class MeasuringJobs:
    def __init__(self) -> None:
        self._jobs: dict[str, _Job] = {}
        self._lab: tuple[LabRun, EngineController] | None = None

    def attach_lab(self, lab: LabRun, engine: EngineController) -> None:
        """The Lab and its engine: they give way to the other jobs."""
        self._lab = (lab, engine)

    def register(self, name: str, running: Callable[[], bool], busy: str, whose: str) -> None:
        """A job that runs alone (a tune, a validation): ``running()`` says whether it is under way now,
        ``busy`` says so in words, ``whose`` names its copy of the pair ("the tune's")."""
        self._jobs[name] = _Job(running, busy, name, whose)

    def running_besides(self, asking: str) -> str | None:
        """What runs now that ``asking`` must wait for, in words, or None."""
        for name, job in self._jobs.items():
            if name != asking and job.running():
                return job.busy
        return None

    def not_now(self, asking: str) -> str | None:
        """Why ``asking`` (a registered job's name, or LAB) cannot start now, for the user; None when it can."""
        busy = self.running_besides(asking)
        if busy is None:
            return None
        if asking == LAB:
            return (
                f"Not now: {busy}. Try again when it ends: two engines sharing the machine "
                "would spoil both measurements (and may not both fit)."
            )
        return f"Not now: {busy}; the two would compete for the machine."

    def refuse(self, asking: str, say: Callable[[str], object]) -> bool:
        """True, after passing the reason to say (a page's banner or status line), when asking cannot start now."""
        refusal = self.not_now(asking)
        if refusal:
            say(refusal)
        return refusal is not None

    def make_room(self, name: str, freed: threading.Event) -> list[str]:
        """Job ``name`` is about to measure with an engine of its own: the Lab's run is stopped, a Lab load
        on the GPU is cancelled, and the Lab's GPU copy of the pair is freed; ``freed`` is set once it
        has been (the job's thread waits for it before loading). Returns what was done, for the user."""
        if self._lab is None:
            return []
        lab, engine = self._lab
        job = self._jobs[name]
        notes = (_stop_lab(lab, engine, job), _free_lab_pair(engine, job, freed))
        return [n for n in notes if n]


def _stop_lab(lab: LabRun, engine: EngineController, job: _Job) -> str | None:
    if lab.mode in ("running", "baseline", "stopping"):
        lab.stop()
        return "the Lab's run was stopped so that it does not compete for the machine"
    if lab.mode == "loading" and engine.gpu_backend:
        lab.stop()  # cancels the load: two copies may not fit
        return (
            f"the Lab's load was cancelled so that {job.whose} copy fits on the GPU; the Lab loads its pair "
            "again when you start it there"
        )
    if lab.mode == "loading":
        return f"the Lab is still loading its pair; that may slow the {job.job}'s first measurements"
    return None


def _free_lab_pair(engine: EngineController, job: _Job, freed: threading.Event) -> str | None:
    """On a GPU two copies may not fit: the Lab's engine frees its copy, and ``freed`` is set once it has
    (or once that engine has gone). On the CPU the copies share the mapped files, so the Lab keeps its
    pair and needs no reload afterwards."""
    if not engine.uses_gpu or not engine.unload():
        return None
    freed.clear()

    def done(*_args) -> None:
        if freed.is_set():
            return
        freed.set()
        engine.unloaded.disconnect(done)
        engine.stateChanged.disconnect(gone)

    def gone(state: str, _message: str) -> None:
        if state in (CRASHED, "stopped"):  # the Lab's worker is gone, and its copy with it
            done()

    engine.unloaded.connect(done)
    engine.stateChanged.connect(gone)
    return (
        f"the Lab's copy of the pair was freed so that {job.whose} copy fits on the GPU; the Lab loads it "
        "again when you start it there"
    )
