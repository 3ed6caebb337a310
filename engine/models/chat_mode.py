"""Chat or raw text: how a target's prompts are run when the user does not say.

Instruct models are served through a chat API, so a target whose GGUF carries a chat
template is measured in chat mode by default, and a base model (no template) on raw
text. ``--chat`` / ``--raw`` (and the Lab's switch) override it; a set of conversations
runs in chat mode only (engine.core.workloads).
"""

from __future__ import annotations

from pathlib import Path

from engine.models.gguf_inspect import GGUFInspectError, inspect_gguf

MODES = ("auto", "chat", "raw")


def has_chat_template(target: str | Path) -> bool:
    """The GGUF declares tokenizer.chat_template (a file that cannot be read counts as no: the
    load that follows gives the clear error)."""
    try:
        return inspect_gguf(target).has_chat_template
    except (GGUFInspectError, OSError):
        return False


def resolve_chat(mode: str, target: str | Path) -> bool:
    """True for chat mode: "chat", or "auto" on a target that has a chat template."""
    if mode not in MODES:
        raise ValueError(f"chat mode must be one of {', '.join(MODES)}, got {mode!r}")
    return mode == "chat" or (mode == "auto" and has_chat_template(target))
