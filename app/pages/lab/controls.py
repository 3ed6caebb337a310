"""The Lab's knob panel: model pair, method, K and the other speculation knobs,
sampling, prompt source; and the Start / Stop / Baseline / Quick check bar, which the
page shows above its charts (`run_bar`) so that it never scrolls out of sight.

The panel only reads and writes widgets and says when something changed; the
Lab page decides what to do with it (send to a running session, or keep for
the next run), and the app's session (app.session) is bound to it, which is how
the other pages see it. Values are the engine.core.settings dataclasses.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QKeyEvent, QKeySequence, QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from app.header_reads import header_reads
from app.pages.lab.knob_help import knob_tooltip
from app.session import CHAT_MODES, CUSTOM_PROMPT
from app.widgets.forms import PathPicker, double_spin_box, push_button, side_by_side, spin_box
from app.widgets.style import error_text
from app.widgets.workload_box import WorkloadBox
from engine.core.settings import MAX_DRAFT_N, SPEC_TYPES, LoadSettings, SamplingSettings, SettingsError, SpecSettings
from engine.measure.quick_check import MAX_TOKENS as QUICK_TOKENS
from engine.models.draft_heads import (
    MethodVerdict,
    method_verdicts,
    pair_verdicts,
    spec_type_reason,
    suggested_method,
    unavailable,
)

METHOD_CHOICES = (
    "draft-simple",
    "ngram-mod",
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-cache",
    "ngram-mod,draft-simple",
    "ngram-simple,draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "none",
)


class _PassEscape(QObject):
    """Lets Esc through to the window's shortcut (the Lab's Stop) from a widget that would keep it: a widget that
    accepts the shortcut-override event gets the key instead of the shortcut, so that event is swallowed here."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.ShortcutOverride and isinstance(event, QKeyEvent):
            return event.key() == Qt.Key.Key_Escape
        return False


def _spin(lo: int, hi: int, value: int, tip: str = ""):
    return spin_box(lo, hi, value, tip, track_keys=False)  # a knob acts when typing ends, not per keystroke


def _dspin(lo: float, hi: float, value: float, step: float, tip: str = ""):
    return double_spin_box(lo, hi, value, step, tip, track_keys=False)


def _keys(sequence: str) -> str:
    """A shortcut as this platform writes it (Ctrl+Return, or ⌘↩ on a Mac)."""
    return QKeySequence(sequence).toString(QKeySequence.SequenceFormat.NativeText)


def _labels_explain(form: QFormLayout) -> None:
    """A row's label gets its field's tooltip: the explanation shows wherever the pointer rests on the row."""
    for row in range(form.rowCount()):
        label = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
        field = form.itemAt(row, QFormLayout.ItemRole.FieldRole)
        if label is None or field is None:
            continue
        label_widget = label.widget()
        if label_widget is None:
            continue
        widget = field.widget()
        inner = field.layout()
        if widget is None and inner is not None and inner.count():
            last = inner.itemAt(inner.count() - 1)
            assert last is not None  # count() says there is one
            widget = last.widget()  # K's row: slider, then box
        if widget is not None and widget.toolTip():
            label_widget.setToolTip(widget.toolTip())


class LabControls(QWidget):
    pairChanged = Signal()  # the target or the draft file
    loadChanged = Signal()  # context, GPU layers, CPU threads or repacking
    knobsChanged = Signal()  # any speculation or sampling knob
    chatModeChanged = Signal()  # auto / chat template / raw text
    startRequested = Signal()
    stopRequested = Signal()
    baselineRequested = Signal()
    checkRequested = Signal()
    loadRequested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        col = QVBoxLayout(self)
        col.addWidget(self._model_pair_box())
        col.addWidget(self._speculation_box(SpecSettings()))
        col.addWidget(self._sampling_box(SamplingSettings()))
        col.addWidget(self._prompts_box())
        col.addStretch(1)
        # the run buttons are not in this (scrolled) panel: the page shows them in a bar above the charts,
        # where a newcomer sees them at any window size (issue 30: below the fold at 1600x1000)
        self.run_bar = self._run_bar()
        self._connect_signals()

    # -- the panel's parts, top to bottom ---------------------------------
    def _model_pair_box(self) -> QGroupBox:
        """The two files and where and how they load: context, GPU layers, placement, threads, repacking."""
        models = QGroupBox("Model pair")
        f = QFormLayout(models)
        self.target = PathPicker("target model (.gguf)")
        self.draft = PathPicker("draft model (.gguf), optional")
        self.ctx = _spin(256, 1 << 20, 4096, knob_tooltip("ctx"))
        self.ngl = _spin(-1, 999, -1, knob_tooltip("ngl"))
        self.threads = _spin(0, 256, 0, knob_tooltip("threads"))
        self.target_on = QComboBox()
        self.target_on.setToolTip(knob_tooltip("target_on"))
        self.draft_on = QComboBox()
        self.draft_on.setToolTip(knob_tooltip("draft_on"))
        self.set_gpu_devices([])
        self.n_cpu_moe = _spin(-1, 999, 0, knob_tooltip("n_cpu_moe"))
        self.n_cpu_moe.setSpecialValueText("all layers")  # -1, the spin box's minimum: --cpu-moe
        self.repack = QCheckBox("repack weights for this CPU (AMX / AVX-512)")
        self.repack.setChecked(True)
        self.repack.setToolTip(knob_tooltip("repack"))
        self.badges = QLabel("")
        self.badges.setWordWrap(True)
        self.load_button = push_button("Load", tip="load the pair into the engine (Ctrl+L)")
        f.addRow("target", self.target)
        f.addRow("draft", self.draft)
        f.addRow("context", self.ctx)
        f.addRow("GPU layers", self.ngl)
        f.addRow("target on", self.target_on)
        f.addRow("draft on", self.draft_on)
        f.addRow("MoE experts in RAM", self.n_cpu_moe)
        f.addRow("CPU threads", self.threads)
        f.addRow(self.repack)
        f.addRow(self.badges)
        f.addRow(self.load_button)
        _labels_explain(f)
        return models

    def _speculation_box(self, d: SpecSettings) -> QGroupBox:
        """The method (with why the pair cannot run it), K on a slider and a box, and the method's own knobs;
        d: the defaults they start from."""
        spec = QGroupBox("Speculation")
        f = QFormLayout(spec)
        self.method = QComboBox()
        self.method.setEditable(True)
        # Esc is the page's Stop: the editable box's line edit would take it as its own (and do nothing)
        self._esc_filter = _PassEscape(self.method)
        line_edit = self.method.lineEdit()
        assert line_edit is not None  # the box is editable
        line_edit.installEventFilter(self._esc_filter)
        self.method.installEventFilter(self._esc_filter)
        self.method.addItems(METHOD_CHOICES)
        self.method.setToolTip(knob_tooltip("method") + "\nknown types: " + ", ".join(SPEC_TYPES))
        # why the chosen method cannot run on this pair (the list greys out what the pair cannot run)
        self.method_note = QLabel("")
        self.method_note.setWordWrap(True)
        self.method_note.hide()
        self._methods: dict[str, MethodVerdict] = method_verdicts(None, None)
        self._methods_of: tuple | None = None  # the files (and their mtimes) the verdicts were read from
        self._suggested = ("", "")  # a method the Lab chose for a new pair, and the note that says why
        self.k_slider = QSlider(Qt.Orientation.Horizontal)
        # K from 1: llama.cpp drafts at least one token (K=0 ran at 1 while an export wrote 0), and the slider
        # covers the box's whole range (it once stopped at 32, clamping a K typed above without a word)
        self.k_slider.setRange(1, MAX_DRAFT_N)
        self.k_slider.setValue(d.draft_n_max)
        self.k = _spin(1, MAX_DRAFT_N, d.draft_n_max, knob_tooltip("k"))
        self.k_slider.setToolTip(self.k.toolTip())
        k_row = QHBoxLayout()
        k_row.addWidget(self.k_slider)
        k_row.addWidget(self.k)
        self.n_min = _spin(0, MAX_DRAFT_N, d.draft_n_min, knob_tooltip("n_min"))
        self.p_min = _dspin(0.0, 1.0, d.draft_p_min, 0.05, knob_tooltip("p_min"))
        self.size_n = _spin(1, 1024, d.ngram_size_n, knob_tooltip("size_n"))
        self.size_m = _spin(1, MAX_DRAFT_N, d.ngram_size_m, knob_tooltip("size_m"))
        self.min_hits = _spin(1, 1000, d.ngram_min_hits, knob_tooltip("min_hits"))
        self.mod_match = _spin(1, 1024, d.ngram_mod_n_match, knob_tooltip("mod_match"))
        self.mod_min = _spin(0, MAX_DRAFT_N, d.ngram_mod_n_min, knob_tooltip("mod_min"))
        self.mod_max = _spin(1, MAX_DRAFT_N, d.ngram_mod_n_max, knob_tooltip("mod_max"))
        f.addRow("method", self.method)
        f.addRow(self.method_note)
        f.addRow("K (draft n-max)", k_row)
        f.addRow("n-min", self.n_min)
        f.addRow("p-min", self.p_min)
        f.addRow("n-gram size n", self.size_n)
        f.addRow("n-gram size m", self.size_m)
        f.addRow("n-gram min hits", self.min_hits)
        f.addRow("ngram-mod match", self.mod_match)
        mod_range = side_by_side(self.mod_min, self.mod_max)
        mod_range.setToolTip(f"{self.mod_min.toolTip()}\n\n{self.mod_max.toolTip()}")
        f.addRow("ngram-mod min / max", mod_range)
        _labels_explain(f)
        return spec

    def _sampling_box(self, s: SamplingSettings) -> QGroupBox:
        """Temperature, top-k, top-p and the seed; s: the defaults they start from."""
        sampling = QGroupBox("Sampling")
        f = QFormLayout(sampling)
        self.temp = _dspin(0.0, 5.0, s.temp, 0.1, knob_tooltip("temp"))
        self.top_k = _spin(0, 1000, s.top_k, knob_tooltip("top_k"))
        self.top_p = _dspin(0.01, 1.0, s.top_p, 0.05, knob_tooltip("top_p"))
        self.seed = _spin(-1, 2**31 - 1, -1, knob_tooltip("seed"))
        f.addRow("temperature", self.temp)
        f.addRow("top-k", self.top_k)
        f.addRow("top-p", self.top_p)
        f.addRow("seed", self.seed)
        _labels_explain(f)
        return sampling

    def _prompts_box(self) -> QGroupBox:
        """The workload (or the prompt typed here), how it is sent (chat template or raw text), max tokens."""
        prompt = QGroupBox("Prompts")
        f = QFormLayout(prompt)
        self.workload = WorkloadBox(files_before=CUSTOM_PROMPT, title="Choose prompts")
        self.workload.set_sets([], [CUSTOM_PROMPT])
        self.workload.setToolTip(
            "the prompts a run goes through: a shipped set, your own set (JSON), your own conversations "
            "(JSONL, one OpenAI chat request per line, e.g. from your logs), or the prompt typed below"
        )
        self.prompt = QPlainTextEdit()
        self.prompt.setPlaceholderText("prompt used when 'custom prompt' is selected")
        self.prompt.setMaximumHeight(80)
        self.chat_mode_box = QComboBox()
        for mode, label in CHAT_MODES:
            self.chat_mode_box.addItem(label, mode)
        self.chat_mode_box.setToolTip(
            "chat template: each prompt is a conversation rendered with the target's own chat template, as "
            "llama-server's /v1/chat/completions renders it (how instruct models are served); raw text: sent "
            "as it is (base models); auto: chat when the target's GGUF carries a template"
        )
        self.chat_hint = QLabel()
        self.chat_hint.setWordWrap(True)
        self.chat_hint.setEnabled(False)  # a muted line under the box
        # engine.measure.quick_check.MAX_TOKENS: `spectune demo` checks at this length, as the Lab's check does
        self.max_tokens = _spin(1, 1 << 16, QUICK_TOKENS, "tokens generated per prompt")
        f.addRow("workload", self.workload)
        f.addRow(self.prompt)
        f.addRow("format", self.chat_mode_box)
        f.addRow(self.chat_hint)
        f.addRow("max tokens", self.max_tokens)
        return prompt

    def _run_bar(self) -> QWidget:
        """Start, Stop, Baseline and Quick check in a row, each with its shortcut on its face."""
        bar = QWidget()
        buttons = QHBoxLayout(bar)
        buttons.setContentsMargins(0, 0, 0, 0)
        self.start_button = push_button(
            f"Start  {_keys('Ctrl+Return')}", tip="run the prompts with speculation, looping until Stop (Ctrl+Return)"
        )
        self.stop_button = push_button(f"Stop  {_keys('Esc')}", tip="stop the running generation (Esc)")
        self.baseline_button = push_button(
            f"Baseline  {_keys('Ctrl+B')}", tip="measure tokens/s without speculation on the same models (Ctrl+B)"
        )
        self.check_button = push_button(
            f"Quick check  {_keys('Ctrl+Shift+Q')}",
            tip=(
                "measure in a few seconds which of a few settings pays on this machine, against no speculation, "
                "and set the knobs to the best (Ctrl+Shift+Q); the Tune page searches thoroughly"
            ),
        )
        for b in (self.start_button, self.stop_button, self.baseline_button, self.check_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        return bar

    def _connect_signals(self) -> None:
        """K's slider and box move together; every widget reports through the panel's own signals."""
        self.k_slider.valueChanged.connect(self.k.setValue)
        self.k.valueChanged.connect(lambda v: self.k_slider.setValue(min(v, self.k_slider.maximum())))
        for w in (
            self.k,
            self.n_min,
            self.size_n,
            self.size_m,
            self.min_hits,
            self.mod_match,
            self.mod_min,
            self.mod_max,
            self.top_k,
            self.seed,
        ):
            w.valueChanged.connect(self.knobsChanged)
        for w in (self.p_min, self.temp, self.top_p):
            w.valueChanged.connect(self.knobsChanged)
        self.method.currentTextChanged.connect(self.knobsChanged)
        self.method.currentTextChanged.connect(self._show_method_note)
        self.target.changed.connect(self.pairChanged)
        self.draft.changed.connect(self.pairChanged)
        self.pairChanged.connect(self.refresh_methods)
        header_reads().ready.connect(self.refresh_methods)
        for w in (self.ctx, self.ngl, self.threads, self.n_cpu_moe):
            w.valueChanged.connect(self.loadChanged)
        self.draft_on.currentIndexChanged.connect(lambda _i: self.loadChanged.emit())
        self.target_on.currentIndexChanged.connect(lambda _i: self.loadChanged.emit())
        self.repack.toggled.connect(self.loadChanged)
        self.load_button.clicked.connect(self.loadRequested)
        self.start_button.clicked.connect(self.startRequested)
        self.stop_button.clicked.connect(self.stopRequested)
        self.baseline_button.clicked.connect(self.baselineRequested)
        self.check_button.clicked.connect(self.checkRequested)
        self.workload.currentTextChanged.connect(lambda t: self.prompt.setEnabled(t == CUSTOM_PROMPT))
        self.chat_mode_box.currentIndexChanged.connect(lambda _i: self.chatModeChanged.emit())

    # -- the pair ---------------------------------------------------------
    def pair(self) -> tuple[Path | None, Path | None]:
        return self.target.path(), self.draft.path()

    def set_pair(self, target: str | Path | None, draft: str | Path | None) -> None:
        self.target.set_path(target, notify=False)
        self.draft.set_path(draft, notify=False)
        self.pairChanged.emit()  # once for both

    def set_target(self, path: str | Path | None) -> None:
        self.target.set_path(path)

    def set_draft(self, path: str | Path | None) -> None:
        self.draft.set_path(path)

    # -- the methods this pair can run ------------------------------------
    def refresh_methods(self) -> None:
        """Grey out the methods the pair cannot run (engine.models.draft_heads), each with its reason as the
        item's tooltip. Read from the files' headers, again only when a file or its modification time changed;
        headers not read yet are read off the GUI thread, and this runs again when they are (app.header_reads)."""
        target, draft = self.target.path(), self.draft.path()
        if not header_reads().warm(target, draft):
            return
        key = tuple((p, p.stat().st_mtime_ns if p.is_file() else None) for p in (target, draft) if p is not None)
        if key != self._methods_of:
            self._methods_of = key
            # no target yet, or a file not there (yet): nothing to say, every method stays on offer
            self._methods = pair_verdicts(*(p if p is not None and p.is_file() else None for p in (target, draft)))
            self._suggest_method(draft is not None and draft.is_file())
        model = self.method.model()
        assert isinstance(model, QStandardItemModel)  # a QComboBox's own model
        # an editable combo box rewrites its text from the current item when that item changes: keep what the
        # user typed or chose (it may be a combination not in the list), and say nothing of it
        text, blocked = self.method.currentText(), self.method.blockSignals(True)
        try:
            for row in range(self.method.count()):
                reason = spec_type_reason(self.method.itemText(row), self._methods)
                item = model.item(row)
                assert item is not None  # one item per row of the box
                if item.isEnabled() == bool(reason) or item.toolTip() != reason:
                    item.setEnabled(not reason)
                    item.setToolTip(reason)
            if self.method.currentText() != text:
                self.method.setEditText(text)
        finally:
            self.method.blockSignals(blocked)
        self._show_method_note()

    def _suggest_method(self, has_draft: bool) -> None:
        """A newly chosen pair that cannot run the method set (draft-simple on a Qwen3.5 target alone, say)
        gets the one it can: its own MTP head, its draft file's method, else ngram-mod; the note says why."""
        current = self.method.currentText().strip() or "none"
        try:
            reason = spec_type_reason(current, self._methods)
        except SettingsError:  # a name being typed: leave it
            return
        suggested = suggested_method(has_draft, self._methods)
        if reason and suggested != current and self._methods[suggested].runs:
            self.method.setCurrentText(suggested)
            self._suggested = (suggested, f"{suggested} chosen for this pair: {reason}")

    def unavailable_methods(self) -> dict[str, str]:
        """method -> why this pair cannot run it: what SpecSettings.validate(unavailable=) takes."""
        return unavailable(self._methods)

    def _show_method_note(self) -> None:
        try:
            reason = spec_type_reason(self.method.currentText().strip() or "none", self._methods)
        except SettingsError:  # a name being typed, or one llama.cpp does not know: Start says so
            reason = ""
        if self._suggested[0] != self.method.currentText().strip():
            self._suggested = ("", "")  # the user chose another method: the Lab's choice and its note are gone
        if reason:
            self.method_note.setText(error_text(reason))
        else:
            self.method_note.setText(self._suggested[1])
        self.method_note.setVisible(bool(self.method_note.text()))

    # -- values -----------------------------------------------------------
    def context(self) -> int:
        return self.ctx.value()

    def gpu_layers(self) -> int:
        return self.ngl.value()

    def load_settings(self) -> LoadSettings:
        target = self.target.path()
        if target is None:
            raise SettingsError("choose a target model first")
        return LoadSettings(
            target=target,
            draft=self.draft.path(),
            ctx=self.ctx.value(),
            ngl=self.ngl.value(),
            ngl_draft=0 if self.draft_on.currentData() == "cpu" else self.ngl.value(),
            device_draft=self.draft_on.currentData() if self.draft_on.currentData() not in ("", "cpu") else "",
            n_cpu_moe=self.n_cpu_moe.value(),
            device=self.target_on.currentData() or "",
            threads=self.threads.value(),
            repack=self.repack.isChecked(),
        ).validate()

    def spec_settings(self) -> SpecSettings:
        return SpecSettings(
            spec_type=self.method.currentText().strip() or "none",
            draft_n_max=self.k.value(),
            draft_n_min=min(self.n_min.value(), self.k.value()),
            draft_p_min=round(self.p_min.value(), 4),
            ngram_size_n=self.size_n.value(),
            ngram_size_m=self.size_m.value(),
            ngram_min_hits=self.min_hits.value(),
            ngram_mod_n_match=self.mod_match.value(),
            ngram_mod_n_min=min(self.mod_min.value(), self.mod_max.value()),
            ngram_mod_n_max=self.mod_max.value(),
        )

    def set_spec_settings(self, spec: SpecSettings) -> None:
        """The inverse of spec_settings(): set every speculation knob (each widget, so the Lab's
        running session and the Export page follow, as if the user had moved them)."""
        self.method.setCurrentText(spec.spec_type)
        self.k.setValue(spec.draft_n_max)
        self.n_min.setValue(spec.draft_n_min)
        self.p_min.setValue(spec.draft_p_min)
        self.size_n.setValue(spec.ngram_size_n)
        self.size_m.setValue(spec.ngram_size_m)
        self.min_hits.setValue(spec.ngram_min_hits)
        # max before min, so no step in between has min > max (which the Lab would clamp and, mid-run, send)
        self.mod_max.setValue(spec.ngram_mod_n_max)
        self.mod_min.setValue(spec.ngram_mod_n_min)
        self.mod_match.setValue(spec.ngram_mod_n_match)

    def sampling_settings(self) -> SamplingSettings:
        seed = self.seed.value()
        return SamplingSettings(
            temp=round(self.temp.value(), 4),
            top_k=self.top_k.value(),
            top_p=round(self.top_p.value(), 4),
            min_p=SamplingSettings().min_p,
            seed=0xFFFFFFFF if seed < 0 else seed,
        )

    # -- placement --------------------------------------------------------
    def set_gpu_devices(self, names: list[str]) -> None:
        """The GPUs the engine reports (its hello: CUDA0, CUDA1, ...): the draft may go to one of them. The
        choice stays when it still exists; one restored before the engine said which GPUs it has waits."""
        wanted = getattr(self, "_wanted_draft_on", None) or self.draft_on.currentData() or ""
        wanted_target = getattr(self, "_wanted_target_on", None) or self.target_on.currentData() or ""
        before = (self.draft_on.currentData(), self.target_on.currentData())
        blocked = self.draft_on.blockSignals(True), self.target_on.blockSignals(True)
        self.draft_on.clear()
        self.draft_on.addItem("the target's GPUs", "")
        self.draft_on.addItem("CPU", "cpu")
        self.target_on.clear()
        self.target_on.addItem("every GPU", "")
        for name in names:
            self.draft_on.addItem(name, name)
            self.target_on.addItem(name, name)
        self.set_draft_on(wanted)
        self.set_target_on(wanted_target)
        self.draft_on.blockSignals(blocked[0])
        self.target_on.blockSignals(blocked[1])
        if (self.draft_on.currentData(), self.target_on.currentData()) != before and before != (None, None):
            self.loadChanged.emit()  # a placement restored before the engine named its GPUs now applies
        self._has_gpus = bool(names)
        # with no GPU there is nothing to place: the CPU is where everything runs
        self.target_on.setEnabled(self._has_gpus)
        self.draft_on.setEnabled(self._has_gpus)

    def set_draft_on(self, where: str) -> None:
        """ "" (the target's GPUs), "cpu", or a GPU's name."""
        idx = self.draft_on.findData(where)
        self._wanted_draft_on = where if idx < 0 else None
        self.draft_on.setCurrentIndex(max(idx, 0))

    def set_target_on(self, where: str) -> None:
        """ "" (every GPU) or a GPU's name (the first of a placement's target devices)."""
        idx = self.target_on.findData(where)
        known = {self.target_on.itemData(i) for i in range(self.target_on.count())}
        if idx < 0 and where and set(where.split(",")) <= known:
            self.target_on.addItem(where.replace(",", " + "), where)  # several GPUs of more than two
            idx = self.target_on.count() - 1
        self._wanted_target_on = where if idx < 0 else None
        self.target_on.setCurrentIndex(max(idx, 0))

    def apply_placement(self, placement) -> None:
        """Set the knobs that place the pair as engine.planning.advice.placement.Placement says (one loadChanged)."""
        blocked = self.blockSignals(True)
        try:
            if placement.draft_on_cpu:
                self.set_draft_on("cpu")
            else:
                self.set_draft_on(placement.draft_devices[0] if placement.draft_devices else "")
            self.n_cpu_moe.setValue(placement.n_cpu_moe)
            self.set_target_on(",".join(placement.target_devices) if placement.target_devices else "")
        finally:
            self.blockSignals(blocked)
        self.loadChanged.emit()

    # -- prompts ----------------------------------------------------------
    def set_workloads(self, names: list[str]) -> None:
        """The workload sets on offer (CUSTOM_PROMPT and PICK_FILE come last); the choice stays when it
        still exists."""
        self.workload.set_sets(names, [CUSTOM_PROMPT])

    def set_workload_file(self, path: str | Path) -> None:
        """Use a workload file (a set's JSON, or chat requests as JSONL): it joins the list before the
        custom prompt."""
        self.workload.add_file(path)

    def chat_mode(self) -> str:
        return str(self.chat_mode_box.currentData())

    def set_chat_mode(self, mode: str) -> None:
        idx = self.chat_mode_box.findData(mode)
        if idx >= 0:
            self.chat_mode_box.setCurrentIndex(idx)

    def workload_name(self) -> str:
        return self.workload.currentText()

    def set_workload(self, name: str) -> bool:
        idx = self.workload.findText(name)
        if idx >= 0:
            self.workload.setCurrentIndex(idx)
        return idx >= 0

    def custom_prompt(self) -> str:
        return self.prompt.toPlainText()

    def set_custom_prompt(self, text: str) -> None:
        self.prompt.setPlainText(text)

    def set_running(self, running: bool) -> None:
        self.start_button.setEnabled(not running)
        self.baseline_button.setEnabled(not running)
        self.check_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.load_button.setEnabled(not running)
        for w in (
            self.target,
            self.draft,
            self.ctx,
            self.ngl,
            self.threads,
            self.target_on,
            self.draft_on,
            self.n_cpu_moe,
            self.repack,
            self.workload,
            self.prompt,
            self.chat_mode_box,
            self.max_tokens,
        ):
            w.setEnabled(not running)
        if not running:
            self.prompt.setEnabled(self.workload.currentText() == CUSTOM_PROMPT)
            self.target_on.setEnabled(self._has_gpus)
            self.draft_on.setEnabled(self._has_gpus)

    # -- persistence ------------------------------------------------------
    def save_state(self) -> dict:
        return {
            "target": self.target.edit.text(),
            "draft": self.draft.edit.text(),
            "ctx": self.ctx.value(),
            "ngl": self.ngl.value(),
            "draft_on": self.draft_on.currentData(),
            "target_on": self.target_on.currentData(),
            "n_cpu_moe": self.n_cpu_moe.value(),
            "threads": self.threads.value(),
            "repack": int(self.repack.isChecked()),
            "method": self.method.currentText(),
            "k": self.k.value(),
            "n_min": self.n_min.value(),
            "p_min": self.p_min.value(),
            "size_n": self.size_n.value(),
            "size_m": self.size_m.value(),
            "min_hits": self.min_hits.value(),
            "temp": self.temp.value(),
            "top_k": self.top_k.value(),
            "top_p": self.top_p.value(),
            "seed": self.seed.value(),
            "workload": self.workload.currentText(),
            "chat_mode": self.chat_mode(),
            "prompt": self.prompt.toPlainText(),
            "max_tokens": self.max_tokens.value(),
        }

    def restore_state(self, state: dict) -> None:
        # one loadChanged and one knobsChanged at the end, not one per widget: each has observers that
        # read the model files (the Models page's pair check)
        blocked = self.blockSignals(True)
        try:
            self._restore_widgets(state)
        finally:
            self.blockSignals(blocked)
        self.refresh_methods()
        self.loadChanged.emit()
        self.knobsChanged.emit()

    def _restore_widgets(self, state: dict) -> None:
        def get(key, cast, default):
            try:
                return cast(state.get(key, default))
            except (TypeError, ValueError):
                return default

        self.target.edit.setText(get("target", str, ""))
        self.draft.edit.setText(get("draft", str, ""))
        self.ctx.setValue(get("ctx", int, self.ctx.value()))
        self.ngl.setValue(get("ngl", int, self.ngl.value()))
        self.set_draft_on(get("draft_on", str, ""))
        self.set_target_on(get("target_on", str, ""))
        self.n_cpu_moe.setValue(get("n_cpu_moe", int, 0))
        self.threads.setValue(get("threads", int, self.threads.value()))
        self.repack.setChecked(bool(get("repack", int, 1)))
        self.method.setCurrentText(get("method", str, self.method.currentText()))
        self.k.setValue(get("k", int, self.k.value()))
        self.n_min.setValue(get("n_min", int, self.n_min.value()))
        self.p_min.setValue(get("p_min", float, self.p_min.value()))
        self.size_n.setValue(get("size_n", int, self.size_n.value()))
        self.size_m.setValue(get("size_m", int, self.size_m.value()))
        self.min_hits.setValue(get("min_hits", int, self.min_hits.value()))
        self.temp.setValue(get("temp", float, self.temp.value()))
        self.top_k.setValue(get("top_k", int, self.top_k.value()))
        self.top_p.setValue(get("top_p", float, self.top_p.value()))
        self.seed.setValue(get("seed", int, self.seed.value()))
        workload = get("workload", str, CUSTOM_PROMPT)
        if self.workload.findText(workload) < 0 and Path(workload).suffix.lower() in (".json", ".jsonl"):
            if Path(workload).is_file():
                self.set_workload_file(workload)  # the user's own file, chosen last time
        self.workload.choose(workload)
        self.set_chat_mode(get("chat_mode", str, "auto"))
        self.prompt.setPlainText(get("prompt", str, ""))
        self.max_tokens.setValue(get("max_tokens", int, self.max_tokens.value()))
