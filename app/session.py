"""The Lab session the pages share: the model pair, the knobs and the prompts.

The Lab page owns the widgets (app.pages.lab.controls) and binds them here; the Tune, Export and
Models pages read and set the session and observe its signals instead of reaching into the Lab.
Values are the engine.core.settings dataclasses.

Signals
  pairChanged()   the target or the draft file changed
  loadChanged()   another load setting changed: context, GPU layers, CPU threads, repacking
  knobsChanged()  a speculation or sampling knob changed
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QObject, Signal, SignalInstance

from engine.core.chat import Conversation, Prompt
from engine.core.settings import LoadSettings, SamplingSettings, SettingsError, SpecSettings

CUSTOM_PROMPT = "custom prompt"  # the workload entry that means "the prompt typed in the Lab"
PICK_FILE = "a file…"  # the workload entry that opens a file dialog (a set's JSON, or chat requests as JSONL)
WORKLOAD_FILES = "Workload sets and conversations (*.json *.jsonl)"
CHAT_MODES = (("auto", "auto"), ("chat", "chat template"), ("raw", "raw text"))  # (mode, what the list shows)


class SessionWidgets(Protocol):
    """What the Lab's controls give the session: its three signals and these values."""

    pairChanged: SignalInstance
    loadChanged: SignalInstance
    knobsChanged: SignalInstance

    def pair(self) -> tuple[Path | None, Path | None]: ...
    def set_pair(self, target: str | Path | None, draft: str | Path | None) -> None: ...
    def set_target(self, path: str | Path | None) -> None: ...
    def set_draft(self, path: str | Path | None) -> None: ...
    def load_settings(self) -> LoadSettings: ...
    def context(self) -> int: ...
    def gpu_layers(self) -> int: ...
    def spec_settings(self) -> SpecSettings: ...
    def unavailable_methods(self) -> dict[str, str]: ...
    def set_spec_settings(self, spec: SpecSettings) -> None: ...
    def sampling_settings(self) -> SamplingSettings: ...
    def workload_name(self) -> str: ...
    def set_workload(self, name: str) -> bool: ...
    def custom_prompt(self) -> str: ...
    def set_custom_prompt(self, text: str) -> None: ...
    def chat_mode(self) -> str: ...
    def set_chat_mode(self, mode: str) -> None: ...
    def save_state(self) -> dict: ...
    def restore_state(self, state: dict) -> None: ...


def shipped_workloads() -> list[str]:
    """The workload sets SpecTune ships, by name; none when they cannot be read (a custom prompt still works)."""
    try:
        from engine.core.workloads import shipped_names

        return shipped_names()
    except (ImportError, OSError, ValueError):
        return []


class LabSession(QObject):
    pairChanged = Signal()
    loadChanged = Signal()
    knobsChanged = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._widgets: SessionWidgets | None = None

    def bind(self, widgets: SessionWidgets) -> None:
        """The Lab's controls hold the values from now on; their changes become the session's signals."""
        self._widgets = widgets
        widgets.pairChanged.connect(self.pairChanged)
        widgets.loadChanged.connect(self.loadChanged)
        widgets.knobsChanged.connect(self.knobsChanged)
        widgets.pairChanged.connect(self._suggest_workload)

    @property
    def _w(self) -> SessionWidgets:
        if self._widgets is None:
            raise RuntimeError("the Lab page binds the session's widgets before any other page uses it")
        return self._widgets

    # -- the pair -----------------------------------------------------------------------------------
    def target(self) -> Path | None:
        return self._w.pair()[0]

    def draft(self) -> Path | None:
        return self._w.pair()[1]

    def set_pair(self, target: str | Path | None, draft: str | Path | None) -> None:
        """Both files at once (one pairChanged)."""
        self._w.set_pair(target, draft)

    def offer_pair(self, target: str | Path, draft: str | Path | None) -> str | None:
        """A pair chosen outside the Lab (the Models page): set it. The workload set it brought along
        (_suggest_workload), or None when the Lab's choice stayed."""
        before = self.workload()
        self.set_pair(target, draft)
        return self.workload() if self.workload() != before else None

    def _suggest_workload(self) -> None:
        """A new pair, while the Lab has neither a workload set nor a typed prompt, gets the set that suits its
        target (engine.core.workloads.suggested_workload), however it was chosen (the Models page, the Lab's
        file boxes, a preset), so that Start runs at once instead of asking for a prompt (issue 30 #3)."""
        from engine.core.workloads import suggested_workload

        target = self.target()
        if target is None or self.workload() != CUSTOM_PROMPT or self.custom_prompt().strip():
            return
        self.set_workload(suggested_workload(str(target)))

    def set_target(self, path: str | Path | None) -> None:
        """The target alone; the draft stays."""
        self._w.set_target(path)

    def set_draft(self, path: str | Path | None) -> None:
        self._w.set_draft(path)

    def use_demo_pair(self) -> None:
        """The small pair SpecTune ships (or, in a checkout without it, a synthetic one made once): the offline
        first step that the Start page, the Models page and the pages that need a pair all offer."""
        from engine.measure.demo import demo_pair

        self.set_pair(*demo_pair())

    # -- the knobs ----------------------------------------------------------------------------------
    def load_settings(self) -> LoadSettings:
        """Checked (SettingsError says what is missing or wrong: no target, a file that is not there)."""
        return self._w.load_settings()

    def context(self) -> int:
        """The context size as set, for a memory plan made before the pair is complete."""
        return self._w.context()

    def gpu_layers(self) -> int:
        return self._w.gpu_layers()

    def spec_settings(self) -> SpecSettings:
        return self._w.spec_settings()

    def unavailable_methods(self) -> dict[str, str]:
        """The speculative types the pair cannot run, each with the sentence that says why
        (engine.models.draft_heads): what SpecSettings.validate(unavailable=) takes."""
        return self._w.unavailable_methods()

    def set_spec_settings(self, spec: SpecSettings) -> None:
        """Every speculation knob, as if the user had moved them: a running Lab session follows."""
        self._w.set_spec_settings(spec)

    def sampling_settings(self) -> SamplingSettings:
        return self._w.sampling_settings()

    def checked_settings(self) -> tuple[LoadSettings, SpecSettings, SamplingSettings]:
        """The Lab's settings, each validated, for a job that runs them in a llama-server of its own (a
        validation, serving); SettingsError (or the file's ValueError, OSError) says why they cannot run,
        the pre-load check's refusal included."""
        load = self.load_settings()
        spec = self.spec_settings().validate(has_draft=load.draft is not None, unavailable=self.unavailable_methods())
        sampling = self.sampling_settings().validate()
        problem = self.load_refusal(load)
        if problem:
            raise SettingsError(problem)
        return load, spec, sampling

    def summary_html(self, spec: bool = False) -> str:
        """The Lab's pair and settings in one sentence, for the pages that use them without their knobs
        (Tune, Serve); spec: the speculation setting too. A setting that cannot be read is said instead."""
        try:
            load, s, setting = self.load_settings(), self.sampling_settings(), self.spec_settings()
        except SettingsError as exc:
            return f"From the Lab page: <i>{html.escape(str(exc))}</i>"
        target = html.escape(load.target.name)
        draft = html.escape(load.draft.name) if load.draft else "no draft model (n-gram methods only)"
        threads = f"{load.threads} threads" if load.threads else "default threads"
        named = "no speculation" if setting.spec_type == "none" else setting.label()
        how = f"<b>{html.escape(named)}</b>, " if spec else ""
        return (
            f"From the Lab page: <b>{target}</b> + <b>{draft}</b>, {how}context {load.ctx}, {threads}, "
            f"GPU layers {'auto' if load.ngl == -1 else load.ngl}, temperature {s.temp:g}. Change them there."
        )

    def load_refusal(self, load: LoadSettings) -> str | None:
        """Why this pair cannot load at all (a broken file, vocabularies llama.cpp rejects), or None: the
        pre-load check without the memory plan, which only the engine that loads it can judge."""
        from engine.planning.advice.preflight import preflight_load

        return preflight_load(load, None).refusal

    # -- the prompts --------------------------------------------------------------------------------
    def workload(self) -> str:
        """The chosen workload set's name, or CUSTOM_PROMPT."""
        return self._w.workload_name()

    def set_workload(self, name: str) -> bool:
        """False when there is no such set (the choice stays)."""
        return self._w.set_workload(name)

    def custom_prompt(self) -> str:
        return self._w.custom_prompt()

    def set_custom_prompt(self, text: str) -> None:
        self._w.set_custom_prompt(text)

    def chat_mode(self) -> str:
        """ "auto", "chat" or "raw" as chosen in the Lab."""
        return self._w.chat_mode()

    def set_chat_mode(self, mode: str) -> None:
        self._w.set_chat_mode(mode)

    def chat(self) -> bool:
        """Prompts run as conversations through the target's chat template: chosen, or (auto) because the
        target's GGUF carries a template."""
        from engine.models.chat_mode import resolve_chat

        target = self.target()
        mode = self.chat_mode()
        return mode == "chat" or (target is not None and resolve_chat(mode, target))

    def chat_summary(self) -> str:
        """One line on how prompts will run, for the Lab's prompt panel."""
        mode, chat = self.chat_mode(), self.chat()
        if mode == "auto" and self.target() is not None:
            why = "the target carries a chat template" if chat else "the target has no chat template (a base model)"
            return f"{'chat' if chat else 'raw text'}: {why}"
        return "chat: through the target's chat template, as /v1/chat/completions" if chat else "raw text, no template"

    def prompts_of(self, workload: str) -> list[Prompt]:
        """A set's prompts as this session runs them: raw texts, or conversations in chat mode (a set of
        conversations runs in chat mode only). WorkloadError (a ValueError) or OSError when the set cannot
        be read; SettingsError for a set of conversations with raw text chosen."""
        from engine.core.workloads import load_workload

        w = load_workload(workload)
        if w.has_conversations and self.chat_mode() == "raw":
            raise SettingsError(f"{w.name} holds conversations: they run in chat mode only (choose auto or chat)")
        return w.to_run(chat=w.has_conversations or self.chat())

    def custom_prompts(self) -> list[Prompt]:
        """The Lab's typed prompt, as text or (chat mode) one user message; SettingsError when empty."""
        text = self.custom_prompt()
        if not text.strip():
            raise SettingsError("write a prompt, or choose a workload set")
        return [Conversation.user(text) if self.chat() else text]

    def collect_prompts(self) -> list[Prompt]:
        """The prompts of the chosen set, or the custom prompt; SettingsError when that is empty, a
        WorkloadError (a ValueError) or OSError when the set cannot be read."""
        name = self.workload()
        if name == CUSTOM_PROMPT:
            return self.custom_prompts()
        if name == PICK_FILE:
            raise SettingsError("choose a workload file first")
        return self.prompts_of(name)

    # -- persistence --------------------------------------------------------------------------------
    def save_state(self) -> dict:
        return self._w.save_state()

    def restore_state(self, state: dict) -> None:
        self._w.restore_state(state)
