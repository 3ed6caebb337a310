"""The engine worker's events, as types: what engine.runtime.worker writes and what its readers take apart.

The wire carries JSON objects (engine.runtime.protocol); these TypedDicts name each event's fields once, so
that mypy holds the worker that builds an event and every reader of it (the client, the CLI, the Lab's live
session, the app's EngineController and pages) to the same keys. A field that only some events of a kind
carry sits in a ``total=False`` part. Settings travel as engine.core.settings.to_dict's plain dicts, and a
finished run's counters as engine.core.stats.RunSummary.

Events the client makes itself, not the worker: ``cycle`` (one record of a ``cycles`` batch, with the
request's id and run), ``state``, ``crashed`` and ``stopped``.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from engine.core.stats import CycleTimes, RunSummary


class Cycle(CycleTimes):
    """One cycle of a generation: the prompt's (prompt True) or one speculative or plain step."""

    i: int
    prompt: bool
    n_prompt: int
    drafted: int
    accepted: int
    emitted: int
    replayed: int  # a hybrid target verified the accepted tokens again (its state cannot drop a rejection)
    tokens: list[int]
    text: str
    pieces: list[str]
    k: int  # the draft length set for this cycle
    epoch: int  # the settings' epoch: it moves when a knob update takes effect
    n_past: int
    eog: bool


class CycleEvent(Cycle):
    """A cycle as the client hands it on, one event a cycle."""

    event: Literal["cycle"]
    id: Any
    run: Any


class CyclesEvent(TypedDict):
    event: Literal["cycles"]
    id: Any
    run: Any
    cycles: list[Cycle]


class _Hello(TypedDict):
    event: Literal["hello"]
    protocol: int
    engine: str
    pid: int


class HelloEvent(_Hello, total=False):
    """The worker's first words: protocol and engine versions, its pid, and what its start found: the native
    engine's llama.cpp build, devices and backends, or the llama-server engine's binary and version."""

    engine_kind: str  # "native" or "llama-server"
    llama: Any  # the llama.cpp build: its info (native) or the binary's version line (llama-server)
    devices: list[dict[str, Any]]
    backends: dict[str, Any]
    server: str  # the llama-server engine's binary
    native_failure: str  # the client's note: why the native engine did not start, so llama-server runs


class LoadProgressEvent(TypedDict):
    event: Literal["load_progress"]
    id: Any
    stage: str  # "loading", "target", "draft", "loaded"
    progress: float  # 0..1 of the stage


class MemoryItem(TypedDict):
    """One buffer of a loaded model, as llama.cpp's memory breakdown reports it."""

    model: str
    buffer_type: str
    model_bytes: int
    context_bytes: int
    compute_bytes: int


class _Loaded(TypedDict):
    event: Literal["loaded"]
    id: Any
    has_draft: bool
    n_ctx: int
    memory: list[MemoryItem]
    load_s: float
    settings: dict[str, Any]  # the LoadSettings it loaded


class LoadedEvent(_Loaded, total=False):
    repack: bool  # False: the llama-server engine turned repacking off to fit (notice says why)
    notice: str


class _Started(TypedDict):
    event: Literal["started"]
    id: Any
    run: Any
    baseline: bool
    spec: dict[str, Any]
    sampling: dict[str, Any]


class StartedEvent(_Started, total=False):
    chat_prompt: str  # chat mode: the prompt the chat template made
    chat_format: str
    server_restarted: bool  # the llama-server engine started a fresh server for this generation
    server_start_s: float  # and how long that took


class _Updated(TypedDict):
    event: Literal["updated"]
    id: Any
    spec: dict[str, Any]
    sampling: dict[str, Any]
    from_cycle: int | None  # the first cycle run with the new settings; None: the next generation's


class UpdatedEvent(_Updated, total=False):
    run: Any
    from_next_generation: bool  # llama-server takes settings at a generation's start


class _Finished(TypedDict):
    event: Literal["done", "cancelled"]
    id: Any
    run: Any
    summary: RunSummary


class FinishedEvent(_Finished, total=False):
    """A generation's end: done (all of it) or cancelled (what ran before the cancel)."""

    baseline: bool
    spec: dict[str, Any]
    sampling: dict[str, Any]


class ErrorEvent(TypedDict):
    event: Literal["error", "fatal"]
    id: Any
    kind: str  # a stable word: invalid_settings, invalid_model, busy, cancelled, internal, ...
    message: str  # for people


class MeasuredEvent(TypedDict):
    event: Literal["measured"]
    id: Any
    which: str  # "target" or "draft"
    n_past: int
    ms: dict[str, float]  # batch size (as text) -> median ms of a forward pass


class MemoryEvent(TypedDict):
    event: Literal["memory"]
    id: Any
    items: list[MemoryItem]


class ConfiguredEvent(TypedDict):
    event: Literal["configured"]
    id: Any
    spec: dict[str, Any]
    sampling: dict[str, Any]


class TokensEvent(TypedDict):
    event: Literal["tokens"]
    id: Any
    tokens: list[int]


class ChatEvent(TypedDict):
    """The target's chat template applied to a conversation, as llama-server's chat endpoint applies it."""

    event: Literal["chat"]
    id: Any
    prompt: str
    format: str
    explicit_template: bool
    supports_thinking: bool
    enable_thinking: bool
    additional_stops: list[str]


class DoneWithEvent(TypedDict):
    """The answers that carry nothing but the request's id: unloaded, bye; cancel_sent adds running."""

    event: Literal["unloaded", "bye"]
    id: Any


class CancelSentEvent(TypedDict):
    event: Literal["cancel_sent"]
    id: Any
    running: bool  # a load or generation was running and will end


class StateEvent(TypedDict):
    event: Literal["state"]
    state: str
    message: str


class CrashedEvent(TypedDict):
    """The worker died (crashed, with llama.cpp's last words in message), or was stopped while a request
    waited (stopped)."""

    event: Literal["crashed", "stopped"]
    message: str
    exit_code: int | str | None


Event = (
    ConfiguredEvent
    | TokensEvent
    | ChatEvent
    | DoneWithEvent
    | CancelSentEvent
    | CyclesEvent
    | CycleEvent
    | HelloEvent
    | LoadProgressEvent
    | LoadedEvent
    | StartedEvent
    | UpdatedEvent
    | FinishedEvent
    | ErrorEvent
    | MeasuredEvent
    | MemoryEvent
    | StateEvent
    | CrashedEvent
)
