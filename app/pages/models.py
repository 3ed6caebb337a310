"""The Models page: the shipped demo models, and a check of the Lab's current
pair before anything is loaded: llama.cpp's vocabulary rule (engine.compat)
and a memory plan that counts both models (engine.memory_plan) against the
free VRAM the Hardware page sees, or the free RAM on a CPU-only machine.
"""

from __future__ import annotations

from PySide6.QtWidgets import (QGroupBox, QLabel, QPushButton, QTableWidget, QTableWidgetItem, QVBoxLayout,
                               QWidget)

GIB = 2 ** 30


class ModelsPage(QWidget):
    def __init__(self, lab, hardware=None, parent: QWidget | None = None):
        super().__init__(parent)
        self.lab = lab
        self.hardware = hardware
        col = QVBoxLayout(self)
        col.addWidget(QLabel("<h3>Models</h3>"))

        shipped = QGroupBox("Shipped with SpecTune (no download)")
        s_col = QVBoxLayout(shipped)
        self.shipped_table = QTableWidget(0, 3)
        self.shipped_table.setHorizontalHeaderLabels(("file", "role", "size"))
        self.shipped_table.horizontalHeader().setStretchLastSection(True)
        use = QPushButton("Use the demo pair in the Lab")
        use.clicked.connect(self.use_demo_pair)
        s_col.addWidget(self.shipped_table)
        s_col.addWidget(use)
        col.addWidget(shipped)

        check = QGroupBox("The Lab's pair, checked before loading")
        c_col = QVBoxLayout(check)
        self.compat_badge = QLabel("choose a target and a draft in the Lab")
        self.fit_badge = QLabel("")
        self.plan_label = QLabel("")
        for w in (self.compat_badge, self.fit_badge, self.plan_label):
            w.setWordWrap(True)
            c_col.addWidget(w)
        again = QPushButton("Check again")
        again.clicked.connect(self.check_pair)
        c_col.addWidget(again)
        col.addWidget(check)
        col.addStretch(1)
        self._fill_shipped()
        lab.controls.modelsChanged.connect(self.check_pair)
        lab.controls.ctx.valueChanged.connect(self.check_pair)
        self.check_pair()

    def _fill_shipped(self) -> None:
        from engine.demo_models import list_demo_models

        rows = [(m.path.name, f"{m.role} ({m.quant})", m.size_bytes) for m in list_demo_models() if m.exists]
        self.shipped_table.setRowCount(len(rows))
        for r, (name, role, size) in enumerate(rows):
            for c, value in enumerate((name, role, f"{size / 2 ** 20:.1f} MiB")):
                self.shipped_table.setItem(r, c, QTableWidgetItem(value))

    def use_demo_pair(self) -> None:
        from engine.demo import demo_pair

        target, draft = demo_pair()
        self.lab.controls.target.set_path(target)
        self.lab.controls.draft.set_path(draft)

    # -- the pair check ---------------------------------------------------
    def check_pair(self) -> None:
        c = self.lab.controls
        target, draft = c.target.path(), c.draft.path()
        if target is None or not target.is_file():
            self.compat_badge.setText("choose a target model in the Lab")
            self.fit_badge.setText("")
            self.plan_label.setText("")
            return
        from engine.compat import check_pair
        from engine.gguf_inspect import GGUFInspectError, inspect_gguf
        from engine.memory_plan import GpuBudget, PlanError, plan_memory

        try:
            t_info = inspect_gguf(target)
            d_info = inspect_gguf(draft) if draft and draft.is_file() else None
        except (GGUFInspectError, OSError) as exc:
            self.compat_badge.setText(f"<b style='color:#c62828'>✗ cannot read the model:</b> {exc}")
            self.fit_badge.setText("")
            return
        if d_info is None:
            self.compat_badge.setText("no draft model: only the n-gram methods can speculate")
        else:
            verdict = check_pair(t_info, d_info)
            if verdict["compatible"]:
                self.compat_badge.setText("<b style='color:#2e7d32'>✓ compatible</b> (same vocabulary by "
                                          "llama.cpp's rule)")
            else:
                self.compat_badge.setText("<b style='color:#c62828'>✗ incompatible:</b> "
                                          + "; ".join(verdict["reasons"]))
        report = self.hardware.report if self.hardware is not None else None
        gpus = [GpuBudget(g.llama_name, g.memory_free_bytes) for g in (report.gpus if report else [])
                if g.memory_free_bytes is not None]
        features = report.cpu.features if report else ()
        try:
            plan = plan_memory(t_info, c.ctx.value(), draft=d_info, n_gpu_layers=c.ngl.value(),
                               n_gpu_layers_draft=c.ngl.value(), gpus=gpus, cpu_features=features)
        except PlanError as exc:
            self.fit_badge.setText(f"no memory plan: {exc}")
            return
        totals = plan.to_dict()["totals"]
        if plan.fits is None:
            free = report.cpu.ram_available_bytes if report else None
            ok = free is None or totals["all_bytes"] <= free
            mark = "<b style='color:#2e7d32'>✓ fits</b>" if ok else "<b style='color:#c62828'>✗ does not fit</b>"
            self.fit_badge.setText(f"{mark} in RAM: needs {totals['all_bytes'] / GIB:.2f} GiB"
                                   + (f", {free / GIB:.1f} GiB available" if free else ""))
        else:
            mark = "<b style='color:#2e7d32'>✓ fits</b>" if plan.fits else "<b style='color:#c62828'>✗ does not fit</b>"
            self.fit_badge.setText(f"{mark} in VRAM: {totals['vram_bytes'] / GIB:.2f} GiB planned on the GPUs, "
                                   f"{totals['host_bytes'] / GIB:.2f} GiB in host memory")
        by_kind = {}
        for item in plan.items:
            key = f"{item.model} {item.kind}"
            by_kind[key] = by_kind.get(key, 0) + item.bytes
        self.plan_label.setText("plan: " + ", ".join(f"{k} {v / 2 ** 20:.1f} MiB" for k, v in by_kind.items()))
        self.last_plan = plan
