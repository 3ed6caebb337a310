"""The engine worker's wire protocol: JSON objects, one per line, UTF-8.

Requests (client -> worker) carry ``cmd`` and an ``id`` the replies echo:

  load      {"load": LoadSettings}                 -> load_progress*, loaded | error
            (load_progress: stage "target" / "draft" with progress 0..1 as the weights are
            read; a cancel while loading stops it: error with kind "cancelled")
  configure {"spec": {...}, "sampling": {...}}     -> configured | error
  generate  {"prompt" | "messages", "max_tokens", "baseline", "run", optional "spec"/"sampling",
             "batch_ms", "chat_template_kwargs"}
                                                    -> started, cycles*, done | cancelled | error
            (with messages, the chat template makes the prompt; started then carries
            "chat_prompt", the rendered text, and "chat_format")
            (``cycles`` carries a list of cycle records, at most one message per
            batch_ms, default 25; engine.runtime.client hands them on as single "cycle" events)
  update    {"spec": {changes}, "sampling": {changes}}  (mid-run knobs) -> updated | error
  cancel    {}                                     -> the running generate ends with cancelled,
                                                    a running load with error kind "cancelled"
  measure   {"which", "sizes", "n_past", "reps"}   -> measured {"ms": {size: median ms}}
  memory    {}                                     -> memory
  tokenize  {"text", "add_special"}                -> tokens
  chat      {"messages", optional "chat_template_kwargs"}
                                                    -> chat {"prompt", "format", "explicit_template",
                                                       "supports_thinking", "enable_thinking", "additional_stops"}
            (the target's chat template applied as llama-server's /v1/chat/completions does)
  unload    {}                                     -> unloaded
  shutdown  {}                                     -> bye, then the worker exits

Events (worker -> client) carry ``event``. The worker speaks first with
``hello`` (protocol version, engine version, llama.cpp build, devices, and the
backends: engine.llama.backends.BackendReport.to_dict()); a
client refuses a worker whose protocol differs from its own. ``error`` events
carry ``kind`` (a stable word) and ``message`` (for people).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

PROTOCOL_VERSION = 1
ENGINE_VERSION = "0.1.0"

COMMANDS = (
    "load",
    "configure",
    "generate",
    "update",
    "cancel",
    "measure",
    "memory",
    "tokenize",
    "chat",
    "unload",
    "shutdown",
)


class ProtocolError(ValueError):
    pass


def has_gpu_device(hello: Mapping[str, Any]) -> bool:
    """The worker's hello lists a device other than the CPU (a GPU build on a machine with a GPU)."""
    return any(not str(d.get("name", "")).upper().startswith("CPU") for d in hello.get("devices", []))


def encode(msg: dict[str, Any]) -> bytes:
    return (json.dumps(msg, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def decode(line: bytes | str) -> dict[str, Any]:
    try:
        msg = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {exc.msg}") from exc
    if not isinstance(msg, dict):
        raise ProtocolError("a message must be a JSON object")
    return msg
