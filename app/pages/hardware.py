"""The Hardware page: every NVIDIA GPU (NVML, through engine.planning.hardware) with its
VRAM bar, bandwidth, PCIe link and load, the CPU and RAM, and the devices the
engine's llama.cpp build actually runs on. Without a GPU or a driver the page
says so plainly and shows the CPU fallback. Re-read every 2 s while visible.
"""

from __future__ import annotations

from types import ModuleType

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QGroupBox, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.widgets.page_shortcuts import add_page_shortcuts
from app.widgets.style import WARNING_BACKGROUND, error_text
from engine.planning.hardware import GpuInfo, HardwareReport, probe, refresh, refresh_ram

GIB = 2**30


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f} GiB"


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
                f"VRAM used {_gib(used)} of {_gib(g.memory_total_bytes)}, free {_gib(g.memory_free_bytes)}"
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
    def __init__(self, controller, parent: QWidget | None = None, nvml: ModuleType | None = None):
        super().__init__(parent)
        self.controller = controller
        self._nvml = nvml
        self.report: HardwareReport = probe(nvml)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.cpu = QLabel()
        self.cpu.setWordWrap(True)
        self.engine_label = QLabel("engine: starting…")
        self.engine_label.setWordWrap(True)
        self.gpu_col = QVBoxLayout()
        self.gpu_boxes: list[GpuBox] = []
        again = QPushButton("Refresh (F5)")
        again.clicked.connect(self.reprobe)
        add_page_shortcuts(self, (("F5", self.reprobe),))
        col = QVBoxLayout(self)
        col.addWidget(QLabel("<h3>Hardware</h3>"))
        col.addWidget(self.status)
        col.addLayout(self.gpu_col)
        cpu_box = QGroupBox("CPU and memory")
        QVBoxLayout(cpu_box).addWidget(self.cpu)
        col.addWidget(cpu_box)
        engine_box = QGroupBox("What the engine runs on")
        QVBoxLayout(engine_box).addWidget(self.engine_label)
        col.addWidget(engine_box)
        col.addWidget(again)
        col.addStretch(1)
        controller.hello.connect(self._on_hello)
        self.timer = QTimer(self)
        self.timer.setInterval(2000)
        self.timer.timeout.connect(self._poll)
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
            self.status.setStyleSheet(f"background: {WARNING_BACKGROUND}; padding: 6px;")
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
            f"{c.logical_cores} logical cores · RAM {_gib(c.ram_total_bytes)}, available "
            f"{_gib(c.ram_available_bytes)} · {', '.join(c.features) or 'no AVX2/AVX-512/AMX'}"
        )

    def _on_hello(self, ev: dict) -> None:
        devices = ", ".join(f"{d['name']} ({d['description']})" for d in ev.get("devices", []))
        warn = ""
        if self.report.gpus and not any(d["name"].startswith("CUDA") for d in ev.get("devices", [])):
            warn = (
                "<br>"
                + error_text("An NVIDIA GPU is present but this engine is a CPU build.")
                + " Rebuild with <code>bash scripts/setup.sh --cuda</code>."
            )
        self.engine_label.setText(f"<b>llama.cpp devices:</b> {devices}{warn}<br><small>{ev.get('llama', '')}</small>")

    def vram_summary(self) -> str:
        r = self.report
        if r.status == "ok" and r.gpus:
            return "  ".join(f"GPU{g.index} {_gib(g.memory_used_bytes)}/{_gib(g.memory_total_bytes)}" for g in r.gpus)
        return f"CPU only · RAM free {_gib(r.cpu.ram_available_bytes)}"
