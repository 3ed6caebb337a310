"""Workload prompt sets: named lists of prompts that a run or a sweep goes through.

A set is a small JSON file (documented in resources/workloads/README.md)::

    {"name": "code-editing",
     "description": "one line that says what the prompts have in common",
     "prompts": [{"id": "rename-variable", "text": "def total_size(paths): ..."}, ...]}

A prompt holds either ``text`` (raw text, or one user message in chat mode) or
``messages`` (an OpenAI-format conversation, run in chat mode only). The shipped sets
live in resources/workloads/<name>.json; a user's own file is loaded by path with the
same rules, and a ``.jsonl`` file of logged chat requests (engine.core.chat) is a set of
conversations named after the file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from engine.core.chat import ChatError, Conversation, load_jsonl
from engine.core.chat import Prompt as RunPrompt
from engine.core.paths import RESOURCES_DIR

WORKLOADS_DIR = RESOURCES_DIR / "workloads"
MIN_PROMPTS = 1  # a user's own file may hold one prompt or many
SHIPPED_PROMPTS = (10, 20)  # what each set in resources/workloads holds: enough to average, few to stay quick
MAX_DESCRIPTION = 200
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
KEYS = {"name", "description", "prompts"}
PROMPT_KEYS = ({"id", "text"}, {"id", "messages"})


# a model whose name says it writes code ("Qwen2.5-Coder", "codellama", "starcoder2", "Codestral")
_CODE_MODEL = re.compile(r"cod(e|er|estral)", re.IGNORECASE)


def suggested_workload(model: str) -> str:
    """The shipped set a model is tried on when nobody chose one: code-editing (chat requests about code) for a
    model whose name or path says it writes code, explanation otherwise. ``model``: its file's path (a hub
    cache's folder names the repository) or its name."""
    return "code-editing" if _CODE_MODEL.search(model) else "explanation"


class WorkloadError(ValueError):
    """An unknown set name, or a file that is not a valid workload."""


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str  # the raw text; for a conversation, its newest user message (what lists show)
    conversation: Conversation | None = None

    def to_run(self, chat: bool) -> RunPrompt:
        """What the engine runs: the raw text, or (chat mode) a conversation."""
        if self.conversation is not None:
            if not chat:
                raise WorkloadError(f"prompt {self.id} is a conversation: it runs in chat mode only")
            return self.conversation
        return Conversation.user(self.text) if chat else self.text


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    prompts: tuple[Prompt, ...]
    path: Path | None = None
    warnings: tuple[str, ...] = ()  # what was skipped on reading it (a recording's cut-off last line)

    def texts(self) -> list[str]:
        return [p.text for p in self.prompts]

    @property
    def has_conversations(self) -> bool:
        return any(p.conversation is not None for p in self.prompts)

    def to_run(self, chat: bool) -> list[RunPrompt]:
        return [p.to_run(chat) for p in self.prompts]

    def id_prompts(self, chat: bool) -> list[tuple[str, RunPrompt]]:
        return [(p.id, p.to_run(chat)) for p in self.prompts]


def shipped_names(directory: Path = WORKLOADS_DIR) -> list[str]:
    """Names of the sets shipped in ``directory``, sorted."""
    return sorted(p.stem for p in directory.glob("*.json"))


def list_workloads(directory: Path = WORKLOADS_DIR) -> list[Workload]:
    """Every shipped set, loaded and validated, sorted by name."""
    return [load_workload(directory / f"{name}.json") for name in shipped_names(directory)]


def load_workload(name_or_path: str | Path, directory: Path = WORKLOADS_DIR) -> Workload:
    """A shipped set by name (``"code-editing"``) or a workload file by path."""
    text = str(name_or_path)
    looks_like_path = (
        isinstance(name_or_path, Path) or text.endswith((".json", ".jsonl")) or "/" in text or "\\" in text
    )
    if looks_like_path:
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise WorkloadError(f"workload file not found: {path}")
        if path.suffix.lower() == ".jsonl":
            return load_conversations(path)
    else:
        path = directory / f"{text}.json"
        if not path.is_file():
            known = ", ".join(shipped_names(directory)) or "none"
            raise WorkloadError(f"unknown workload {text!r}; shipped sets: {known} (or give a path to a .json file)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    return parse_workload(data, source=str(path), path=path)


def parse_workload(data: object, source: str = "workload", path: Path | None = None) -> Workload:
    """Validate decoded JSON and build a Workload; every error names ``source``."""

    def fail(msg: str) -> WorkloadError:
        return WorkloadError(f"{source}: {msg}")

    if not isinstance(data, dict):
        raise fail("the top level must be an object with name, description and prompts")
    missing, extra = KEYS - data.keys(), data.keys() - KEYS
    if missing:
        raise fail(f"missing field(s): {', '.join(sorted(missing))}")
    if extra:
        raise fail(f"unknown field(s): {', '.join(sorted(extra))} (allowed: {', '.join(sorted(KEYS))})")
    name, description, prompts = data["name"], data["description"], data["prompts"]
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise fail(f"name must be lowercase letters, digits and '-' (at most 64), got {name!r}")
    if not isinstance(description, str) or not description.strip():
        raise fail("description must be a non-empty string")
    if "\n" in description or len(description) > MAX_DESCRIPTION:
        raise fail(f"description must be one line of at most {MAX_DESCRIPTION} characters")
    if not isinstance(prompts, list):
        raise fail("prompts must be a list")
    if len(prompts) < MIN_PROMPTS:
        raise fail("a set needs at least one prompt, this one has none")
    seen: set[str] = set()
    out = []
    for i, item in enumerate(prompts):
        where = f"prompt {i + 1}"
        if not isinstance(item, dict) or set(item.keys()) not in PROMPT_KEYS:
            raise fail(f"{where} must be an object with exactly the fields id and text (or id and messages)")
        pid = item["id"]
        if not isinstance(pid, str) or not ID_RE.match(pid):
            raise fail(f"{where}: id must be letters, digits, '_', '.' or '-' (at most 64), got {pid!r}")
        if pid in seen:
            raise fail(f"{where}: duplicate id {pid!r}")
        seen.add(pid)
        if "messages" in item:
            try:
                conv = Conversation.of(item["messages"])
            except ChatError as exc:
                raise fail(f"{where} ({pid}): {exc}") from None
            out.append(Prompt(pid, conv.last_user_text(), conv))
            continue
        text = item["text"]
        if not isinstance(text, str) or not text.strip():
            raise fail(f"{where} ({pid}): text must be a non-empty string")
        out.append(Prompt(pid, text))
    return Workload(name, description.strip(), tuple(out), path)


def load_conversations(path: Path) -> Workload:
    """A JSONL file of logged chat requests as a set: one conversation per line, ids chat-1, chat-2, ..."""
    warnings: list[str] = []
    try:
        conversations = load_jsonl(path, warnings)
    except ChatError as exc:
        raise WorkloadError(str(exc)) from None
    name = re.sub(r"[^a-z0-9-]+", "-", path.stem.lower()).strip("-")[:64] or "conversations"
    prompts = tuple(Prompt(f"chat-{i + 1}", c.last_user_text(), c) for i, c in enumerate(conversations))
    return Workload(name, f"{len(prompts)} conversation(s) from {path.name}", prompts, path, tuple(warnings))
