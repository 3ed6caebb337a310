"""The Hardware page: every NVIDIA GPU (NVML, through engine.planning.hardware) with its
VRAM bar, bandwidth, PCIe link and load, the CPU and RAM, and the devices the
engine's llama.cpp build actually runs on: which backend modules its worker loaded (the CPU
variant ggml picked for this CPU) and, for each one that did not load, why (from the worker's
hello, engine.llama.backends). Without a GPU or a driver the page
says so plainly and shows the CPU fallback. Re-read every 2 s while visible.

The speed model's figures sit beside them: each GPU's FP16 throughput from SpecTune's table, and
the CPU's bandwidth, compute and fixed cost per pass as llama.cpp measured them (a probe of about a
minute in engine workers of its own, run on request and cached; engine.measure.device_probe).
"""

from __future__ import annotations

import re
import threading
import time
from html import escape
from pathlib import Path
from types import ModuleType

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QGroupBox, QHBoxLayout, QLabel, QProgressBar, QVBoxLayout, QWidget

from app.background import BackgroundJob
from app.jobs import MeasuringJobs
from app.widgets import style
from app.widgets.forms import push_button
from app.widgets.pace import pace_text
from app.widgets.page_shortcuts import add_page_shortcuts
from app.widgets.style import error_text
from app.widgets.timers import make_timer
from engine.core.units import format_gib
from engine.llama.backends import BackendReport
from engine.measure.device_probe import ProbeCancelled, probe_cpu_speed
from engine.planning.hardware import GpuInfo, HardwareReport, probe, refresh, refresh_ram
from engine.planning.speed.device_speed import DeviceSpeed, cached_cpu_speed, cpu_key, gpu_flops

PROBE_JOB = "cpu-probe"


class GpuBox(QGroupBox):
    def __init__(self, gpu: GpuInfo, parent: QWidget | None = None):
        super().__init__(parent)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.details = QLabel()
        self.details.setWordWrap(True)
        col = QVBoxLayout(self)
        col.addWidget(self.bar)
        col.addWidget(self.details)
        self.update_from(gpu)

    def update_from(self, g: GpuInfo) -> None:
        self.setTitle(f"GPU {g.index} ({g.llama_name}): {g.name or 'unreadable'}")
        if g.memory_total_bytes:
            used = g.memory_used_bytes or 0
            self.bar.setValue(int(1000 * used / g.memory_total_bytes))
            self.bar.setFormat(
                f"VRAM used {format_gib(used)} of {format_gib(g.memory_total_bytes)},"
                f" free {format_gib(g.memory_free_bytes)}"
            )
        else:
            self.bar.setValue(0)
            self.bar.setFormat("VRAM unknown")
        parts = []
        if g.peak_memory_bandwidth_bytes_per_s:
            parts.append(
                f"peak memory bandwidth {g.peak_memory_bandwidth_bytes_per_s / 1e9:.0f} GB/s "
                f"({g.memory_bus_width_bits}-bit bus at {g.max_memory_clock_mhz} MHz)"
            )
        if g.compute_capability:
            parts.append(f"compute capability {g.compute_capability}")
        tflops, flops_source = gpu_flops(g)
        parts.append(f"~{tflops:.0f} TFLOPs FP16 ({flops_source})")
        if g.pcie_generation:
            parts.append(
                f"PCIe gen {g.pcie_generation} x{g.pcie_width} (max gen {g.pcie_max_generation} x{g.pcie_max_width})"
            )
        if g.utilization_gpu_percent is not None:
            parts.append(f"load {g.utilization_gpu_percent}% (memory {g.utilization_memory_percent}%)")
        if g.uuid:
            parts.append(g.uuid)
        if g.errors:
            parts.append("not readable: " + ", ".join(f"{k} ({v})" for k, v in g.errors.items()))
        self.details.setText(" · ".join(parts))


class HardwarePage(QWidget):
    cpuSpeedMeasured = Signal(object)  # a DeviceSpeed, after a probe (the ranking uses it)
    probeMessage = Signal(str)  # what the probe is doing, or why it did not run (HTML)

    def __init__(
        self,
        controller,
        parent: QWidget | None = None,
        nvml: ModuleType | None = None,
        jobs: MeasuringJobs | None = None,
    ):
        super().__init__(parent)
        self.controller = controller
        self._nvml = nvml
        self.jobs = jobs
        self.probe_cache: Path | None = None  # where the CPU probe's result is kept (None: the user cache)
        self.probe_job: BackgroundJob | None = None
        self._probe_open = False  # a probe started whose end the page has not shown yet
        self.cpu_speed: DeviceSpeed | None = None
        self.speed_label = QLabel("llama.cpp's speed on this CPU: not measured yet")
        self.speed_label.setWordWrap(True)
        self.measure_button = push_button(
            "Measure llama.cpp's speed here",
            self.measure_cpu,
            (
                "Writes a 0.37B-parameter model and its Q8_0 and Q4_K_M copies, loads each in an engine of its own and "
                "times llama.cpp's forward passes (a few minutes and about 2 GB of scratch disk, once per machine); "
                "`spectune predict` and the speed model use the result"
            ),
        )
        self.stop_probe_button = push_button(
            "Stop", self.stop_probe, "stop the probe after its current step; nothing is kept", enabled=False
        )
        self._probe_started = 0.0  # time.monotonic() when the probe started
        if jobs is not None:
            jobs.register(PROBE_JOB, self._probing, "the CPU speed probe is running", "the probe's")
        self.report: HardwareReport = probe(nvml)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.cpu = QLabel()
        self.cpu.setWordWrap(True)
        self.engine_label = QLabel("engine: starting…")
        self.engine_label.setWordWrap(True)
        self.gpu_col = QVBoxLayout()
        self.gpu_boxes: list[GpuBox] = []
        again = push_button("Refresh (F5)", self.reprobe)
        add_page_shortcuts(self, (("F5", self.reprobe),))
        col = QVBoxLayout(self)
        col.addWidget(QLabel("<h3>Hardware</h3>"))
        col.addWidget(self.status)
        col.addLayout(self.gpu_col)
        cpu_box = QGroupBox("CPU and memory")
        cpu_col = QVBoxLayout(cpu_box)
        cpu_col.addWidget(self.cpu)
        cpu_col.addWidget(self.speed_label)
        buttons = QHBoxLayout()
        buttons.addWidget(self.measure_button)
        buttons.addWidget(self.stop_probe_button)
        buttons.addStretch(1)
        cpu_col.addLayout(buttons)
        col.addWidget(cpu_box)
        engine_box = QGroupBox("What the engine runs on")
        QVBoxLayout(engine_box).addWidget(self.engine_label)
        col.addWidget(engine_box)
        col.addWidget(again)
        col.addStretch(1)
        controller.hello.connect(self._on_hello)
        self.timer = make_timer(self, 2000, self._poll)
        self.timer.start()
        self._show()

    def reprobe(self) -> None:
        self.report = probe(self._nvml)
        self._show()

    def showEvent(self, event) -> None:
        self._show()  # what the polls read while the page was out of view
        super().showEvent(event)

    def _poll(self) -> None:
        """GPUs are re-read every tick (the status bar shows their VRAM); without one, the page in view
        probes again (a driver may have come), and out of view only the free RAM is re-read, which the
        status bar and the Lab's fit verdicts use."""
        if self.isVisible() or self.report.status == "ok":
            self.report = refresh(self.report, self._nvml)
            self._show()
        else:
            self.report = refresh_ram(self.report)  # shown when the page is next in view

    def _show(self) -> None:
        r = self.report
        if r.status == "ok":
            self.status.setText(f"<b>{r.message}</b>")
            self.status.setStyleSheet("")
        else:
            self.status.setText(
                f"<b>No NVIDIA GPU in use.</b> {r.message}. SpecTune runs the engine on the CPU; "
                "speeds will be far below a GPU's."
            )
            # the scheme's own yellow (read at each refresh, so a switch to dark follows): the light one
            # behind the dark scheme's pale text was unreadable
            self.status.setStyleSheet(f"background: {style.current().warning_background}; padding: 6px;")
        while len(self.gpu_boxes) > len(r.gpus):
            box = self.gpu_boxes.pop()
            self.gpu_col.removeWidget(box)
            box.deleteLater()
        for i, gpu in enumerate(r.gpus):
            if i < len(self.gpu_boxes):
                self.gpu_boxes[i].update_from(gpu)
            else:
                box = GpuBox(gpu)
                self.gpu_boxes.append(box)
                self.gpu_col.addWidget(box)
        c = r.cpu
        self.cpu.setText(
            f"{c.logical_cores} logical cores · RAM {format_gib(c.ram_total_bytes)}, available "
            f"{format_gib(c.ram_available_bytes)} · {', '.join(c.features) or 'no AVX2/AVX-512/AMX'}"
        )

    # -- the CPU speed probe ----------------------------------------------------------
    def _probing(self) -> bool:
        # until its end has been shown, not just until its thread ends: the thread is gone a moment before
        # the queued done/failed reaches this page, and a second probe must not start in that gap
        return self._probe_open

    def measure_cpu(self) -> None:
        if self._probing():
            return
        if self.jobs is not None and self.jobs.refuse(PROBE_JOB, self._say):
            return
        notes = self.jobs.make_room(PROBE_JOB, threading.Event()) if self.jobs is not None else []
        self.measure_button.setEnabled(False)
        self.stop_probe_button.setEnabled(True)
        self._probe_open = True
        self._probe_started = time.monotonic()
        self._say("measuring… " + " ".join(f"({n})" for n in notes))
        cache = self.probe_cache
        # the probe stops between its steps when the job is stopped (the app closing)
        job = BackgroundJob(
            PROBE_JOB,
            lambda report: probe_cpu_speed(progress=report, cache=cache, cancel=job.cancel),
            self,
            what="the CPU probe measuring this machine",
        )
        self.probe_job = job.on(done=self._probed, failed=self._probe_failed, progress=self._probe_progress).start()

    def _say(self, text: str) -> None:
        self.speed_label.setText(text)
        self.probeMessage.emit(text)

    def stop_probe(self) -> None:
        if self._probing() and self.probe_job is not None:
            self.probe_job.cancel.set()  # probe_cpu_speed stops at its next step
            self.stop_probe_button.setEnabled(False)
            self._say("stopping after the current step…")

    def _probe_progress(self, message: str) -> None:
        self._say(f"measuring, {message}… ({probe_pace(message, time.monotonic() - self._probe_started)})")

    def _probe_ended(self) -> None:
        self._probe_open = False
        self.measure_button.setEnabled(True)
        self.stop_probe_button.setEnabled(False)

    def _probed(self, speed: DeviceSpeed) -> None:
        self._probe_ended()
        self._show_cpu_speed(speed)
        self.cpuSpeedMeasured.emit(speed)

    def _probe_failed(self, exc: BaseException) -> None:
        self._probe_ended()
        if isinstance(exc, ProbeCancelled):
            self._say("The CPU probe was stopped; nothing was kept. Measure again to run it from the start.")
            return
        self._say(error_text("The CPU speed probe failed:") + f" {exc}")

    def _show_cpu_speed(self, speed: DeviceSpeed) -> None:
        self.cpu_speed = speed
        self.speed_label.setText(
            f"llama.cpp on this CPU: <b>{speed.bandwidth_bytes_per_s / 1e9:.1f} GB/s</b> memory bandwidth, "
            f"<b>{speed.flops_per_s / 1e9:.0f} GFLOPs</b>, {speed.overhead_ms:.2f} ms fixed per pass"
            + "".join(
                f"; {cls} weights {bw / 1e9:.1f} GB/s, {fl / 1e9:.0f} GFLOPs"
                for cls, (bw, fl, _) in speed.class_rates.items()
                if cls != "F16"
            )
            + (
                f"; attention {speed.attention_flops_per_s / 1e9:.0f} GFLOPs (it grows with the context)"
                if speed.attention_flops_per_s
                else ""
            )
            + f" <small>({speed.source})</small>"
        )
        self.measure_button.setText("Measure again")

    def shutdown(self) -> None:
        if self.probe_job is not None:
            self.probe_job.stop(timeout_s=30.0)

    def _on_hello(self, ev: dict) -> None:
        cached = cached_cpu_speed(cpu_key(str(ev.get("llama", ""))), self.probe_cache)
        if cached is not None and self.cpu_speed is None:
            self._show_cpu_speed(cached)
        devices = ", ".join(f"{d['name']} ({d['description']})" for d in ev.get("devices", []))
        backends = BackendReport.from_dict(ev.get("backends") or {})
        warn = ""
        if self.report.gpus and not any(d["name"].startswith("CUDA") for d in ev.get("devices", [])):
            cuda = next((m for m in backends.modules if m.backend == "cuda"), None)
            if cuda is not None:
                warn = error_text("An NVIDIA GPU is present but the engine's CUDA backend did not load:")
                warn = f"<br>{warn} {escape(cuda.why)}"
            else:
                warn = (
                    "<br>"
                    + error_text("An NVIDIA GPU is present but this engine is a CPU build.")
                    + " Rebuild with <code>bash scripts/setup.sh --cuda</code>."
                )
        # which backend modules loaded (the CPU variant ggml picked for this CPU) and why the others did not
        loaded = "".join(f"<br>{escape(line)}" for line in backends.lines())
        self.engine_label.setText(
            f"<b>llama.cpp devices:</b> {devices}{warn}<br><b>backends</b> "
            f"<small>({escape(backends.directory)})</small>:{loaded}<br><small>{ev.get('llama', '')}</small>"
        )

    def vram_summary(self) -> str:
        r = self.report
        if r.status == "ok" and r.gpus:
            return "  ".join(
                f"GPU{g.index} {format_gib(g.memory_used_bytes)}/{format_gib(g.memory_total_bytes)}" for g in r.gpus
            )
        return f"CPU only · RAM free {format_gib(r.cpu.ram_available_bytes)}"


_STEP = re.compile(r"^step (\d+) of (\d+)")


def probe_pace(message: str, elapsed_s: float) -> str:
    """The time the probe has taken and, from its second step on, what is left at the pace of its steps so far
    (they differ: a write of the 730 MB model is slower than a timing, so it is an estimate and says so)."""
    m = _STEP.match(message)
    if not m:
        return pace_text(0, 0, elapsed_s)
    return pace_text(int(m.group(1)) - 1, int(m.group(2)), elapsed_s)
