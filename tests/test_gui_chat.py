"""The Lab in chat mode, under the offscreen platform, against the real engine worker: an instruct
model's prompts go through its chat template, a JSONL file of conversations is a prompt set, and a
broken file says which line is wrong."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("PySide6")

from .conftest import GUI_WAIT  # noqa: E402

pytestmark = pytest.mark.slow  # every test here starts the engine worker or llama-server


def _prompt_tokens(qtbot, window) -> int:
    """Start the Lab, return the prompt cycle's token count, stop."""
    lab = window.lab
    seen: list[int] = []

    def on_cycles(batch: list) -> None:
        seen.extend(ev["n_prompt"] for ev in batch if ev.get("prompt"))

    window.controller.cycles.connect(on_cycles)
    try:
        lab.start()
        qtbot.waitUntil(lambda: bool(seen) and lab.live.cycles >= 3, timeout=GUI_WAIT)
        lab.stop()
        qtbot.waitUntil(lambda: lab.mode == "idle", timeout=GUI_WAIT)
    finally:
        window.controller.cycles.disconnect(on_cycles)
    return seen[0]


def _use(window, pair, prompt="the value of the data is"):
    c = window.lab.controls
    c.set_pair(*pair)
    c.ctx.setValue(1024)
    c.threads.setValue(1)
    c.method.setCurrentText("draft-simple")
    c.temp.setValue(0.0)
    c.max_tokens.setValue(16)
    c.workload.setCurrentText("custom prompt")
    c.prompt.setPlainText(prompt)


def test_an_instruct_model_runs_through_its_template_unless_raw_text_is_chosen(qtbot, window, chat_pair, pair):
    c = window.lab.controls
    _use(window, chat_pair)
    assert c.chat_mode() == "auto"
    assert c.chat_hint.text().startswith("chat: the target carries a chat template")
    chat_tokens = _prompt_tokens(qtbot, window)
    c.set_chat_mode("raw")
    assert c.chat_hint.text().startswith("raw text")
    raw_tokens = _prompt_tokens(qtbot, window)
    # the ChatML frame around one user message: <|im_start|>user\n ... <|im_end|>\n<|im_start|>assistant\n
    assert chat_tokens > raw_tokens + 6, (chat_tokens, raw_tokens)
    # a base model stays on raw text in auto
    c.set_chat_mode("auto")
    c.set_pair(*pair)
    assert c.chat_hint.text().startswith("raw text: the target has no chat template")
    # the choice is kept with the Lab's state
    c.set_chat_mode("chat")
    assert window.lab.session.chat() is True
    state = c.save_state()
    c.set_chat_mode("auto")
    c.restore_state(state)
    assert c.chat_mode() == "chat"


def test_a_jsonl_file_of_conversations_is_a_prompt_set_and_a_bad_line_is_named(qtbot, window, chat_pair, tmp_path):
    good = tmp_path / "chats.jsonl"
    good.write_text(
        json.dumps({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "def"}]})
        + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "class data:"}]})
        + "\n",
        encoding="utf-8",
    )
    _use(window, chat_pair)
    c = window.lab.controls
    c.set_workload_file(good)
    assert c.workload.currentText() == str(good)
    assert len(window.lab.session.collect_prompts()) == 2
    assert _prompt_tokens(qtbot, window) > 0
    # raw text cannot run conversations: said before anything starts
    c.set_chat_mode("raw")
    window.lab.start()
    assert window.lab.mode == "idle"
    assert "chat mode only" in window.lab.banner.label.text()
    c.set_chat_mode("auto")
    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "ok"}]}\n{"messages": "nope"}\n', encoding="utf-8")
    c.set_workload_file(bad)
    window.lab.start()
    assert window.lab.mode == "idle"
    assert "broken.jsonl, line 2" in window.lab.banner.label.text()
