"""Conversations: prompts in the OpenAI chat format, as instruct models are served.

A ``Conversation`` is the ``messages`` array of a ``/v1/chat/completions`` request. The
engine renders it with the target's own chat template (llama.cpp's chat code, the one
llama-server runs: see ``specrt_chat_prompt``), and the model writes the next assistant
turn. Text prompts stay plain strings: a ``str`` anywhere a prompt is expected means raw
text, sent as it is.

People bring their own conversations as JSONL, one request per line, as API logs hold
them: ``{"messages": [...]}`` (other fields such as ``model`` or ``max_tokens`` are
ignored) or a bare ``[...]`` of messages. When a line ends with an assistant message,
that message is the answer the log recorded: it is dropped, so that the model is
measured writing it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_LINE_BYTES = 4 * 1024 * 1024  # a line longer than this is not a chat request anyone logged


class ChatError(ValueError):
    """Messages that are not an OpenAI-format conversation; the text says where and why."""


@dataclass(frozen=True)
class Conversation:
    """One chat request's messages, kept as canonical JSON text so that a conversation is
    hashable and compares by content (the tuner keys its baselines by prompt)."""

    messages_json: str

    @classmethod
    def of(cls, messages: list[dict[str, Any]]) -> Conversation:
        return cls(json.dumps(parse_messages(messages), ensure_ascii=False, sort_keys=True))

    @classmethod
    def user(cls, text: str) -> Conversation:
        """The one-message conversation a text prompt becomes in chat mode."""
        return cls.of([{"role": "user", "content": text}])

    @property
    def messages(self) -> list[dict[str, Any]]:
        return json.loads(self.messages_json)

    def last_user_text(self) -> str:
        """What a list or a chart label shows of it: the newest user message's text."""
        for msg in reversed(self.messages):
            if msg["role"] == "user":
                return content_text(msg.get("content"))
        return ""


Prompt = str | Conversation  # what the Lab, the tuner, the demo and validation run


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def parse_messages(messages: Any, where: str = "conversation") -> list[dict[str, Any]]:
    """Check an OpenAI-format messages array and return it unchanged (a list of dicts).

    What is refused is what llama-server would refuse, or what SpecTune cannot run:
    images and audio (the runtime loads no multimodal projector)."""
    if not isinstance(messages, list) or not messages:
        raise ChatError(f"{where}: messages must be a non-empty list")
    for i, msg in enumerate(messages):
        at = f"{where}, message {i + 1}"
        if not isinstance(msg, dict):
            raise ChatError(f"{at}: a message must be an object with role and content")
        role = msg.get("role")
        if role not in ROLES:
            raise ChatError(f"{at}: role must be one of {', '.join(ROLES)}, got {role!r}")
        content = msg.get("content")
        if role == "assistant" and content is None and msg.get("tool_calls"):
            continue
        if isinstance(content, list):
            for j, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else None
                if kind != "text" or not isinstance(part.get("text"), str):
                    raise ChatError(
                        f"{at}, content part {j + 1}: only text parts can run here (got type {kind!r}); "
                        "images and audio need a multimodal projector, which SpecTune does not load"
                    )
        elif not isinstance(content, str):
            raise ChatError(f"{at}: content must be a string or a list of text parts")
    if not any(m["role"] == "user" for m in messages):
        raise ChatError(f"{where}: there is no user message")
    return messages


def conversation_from_record(record: Any, where: str) -> Conversation:
    """A logged request (an object with messages, or the bare array) as the conversation to run."""
    if isinstance(record, dict):
        if "messages" not in record:
            raise ChatError(f'{where}: an object needs a "messages" array (OpenAI chat format)')
        messages = record["messages"]
    else:
        messages = record
    messages = parse_messages(messages, where)
    if messages[-1]["role"] == "assistant":
        messages = messages[:-1]  # the recorded answer: the model writes it again
    if not messages or messages[-1]["role"] == "assistant":
        raise ChatError(f"{where}: nothing is left to answer once the recorded assistant turn is dropped")
    return Conversation.of(messages)


def load_jsonl(path: str | Path, warnings: list[str] | None = None) -> list[Conversation]:
    """Every conversation of a JSONL file; blank lines are skipped, and a bad line is an error
    that names its number (nothing is half-loaded). One exception: a last line without its newline
    that is not JSON was cut off while being written (a recording whose program died mid-line,
    engine.serve.record); it is skipped, and said in ``warnings`` when a list is given."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ChatError(f"conversation file not found: {path}")
    out: list[Conversation] = []
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, start=1):
            where = f"{path.name}, line {n}"
            if not raw.endswith(b"\n") and _torn(raw):
                if warnings is not None:
                    warnings.append(f"{where}: cut off while being written ({len(raw)} bytes, no newline); skipped")
                continue
            if len(raw) > MAX_LINE_BYTES:
                raise ChatError(f"{where}: longer than {MAX_LINE_BYTES // (1024 * 1024)} MiB")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ChatError(f"{where}: not UTF-8 text ({exc.reason})") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ChatError(f"{where}: not a JSON value ({exc.msg} at column {exc.colno})") from None
            out.append(conversation_from_record(record, where))
    if not out:
        raise ChatError(f"{path.name}: no conversations in the file")
    return out


def _torn(raw: bytes) -> bool:
    """A line that does not parse as JSON (the last line of a file, without its newline)."""
    try:
        json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return True
    return False
