"""Chat mode: conversations rendered with the target's chat template, exactly as llama-server's
/v1/chat/completions renders and runs them.

The pair is the synthetic one with a ChatML template written into its GGUFs (an instruct model
in miniature); the thinking case uses a template of the Qwen3 kind, whose generation prompt
depends on enable_thinking.
"""

from __future__ import annotations

import json

import pytest

from engine.cli import deploy as deploy_cli
from engine.cli import run as run_cli
from engine.core.chat import ChatError, Conversation, load_jsonl, parse_messages
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.core.workloads import WorkloadError, load_workload, parse_workload
from engine.deploy.export import llama_server_argv
from engine.llama.install import server_path
from engine.llama.server import LlamaServer
from engine.models.chat_mode import resolve_chat
from engine.models.demo_models import demo_pair
from engine.models.synthetic import PairSpec, write_pair
from engine.runtime.client import EngineClient, EngineError

from .conftest import run_registered

# a template of the Qwen3 kind: an assistant turn shows its reasoning between <think> tags, and the
# generation prompt opens a reasoning block, or (thinking off) writes an empty one
THINKING_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if message.reasoning_content is defined and message.reasoning_content -%}"
    "{{- '<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' -}}{%- endif -%}"
    "{{- message['content'] + '<|im_end|>\\n' -}}"
    "{%- else -%}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- else -%}{{- '<think>\\n' -}}{%- endif -%}{%- endif -%}"
)

CONVERSATIONS = [
    [{"role": "user", "content": "def total_size(paths):"}],
    [
        {"role": "system", "content": "You write short Python."},
        {"role": "user", "content": "class data: def value(self): return"},
        {"role": "assistant", "content": "self value"},
        {"role": "user", "content": "the value of the data is"},
    ],
    [{"role": "user", "content": [{"type": "text", "text": "import os import sys "}, {"type": "text", "text": "def"}]}],
]


# -- the conversation format ---------------------------------------------------------------------------


def test_messages_that_are_not_a_conversation_are_refused_with_the_place_and_the_reason():
    with pytest.raises(ChatError, match="message 2: role must be one of"):
        parse_messages([{"role": "user", "content": "hi"}, {"role": "robot", "content": "x"}])
    with pytest.raises(ChatError, match="content part 1: only text parts"):
        parse_messages([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    with pytest.raises(ChatError, match="no user message"):
        parse_messages([{"role": "system", "content": "be brief"}])
    with pytest.raises(ChatError, match="non-empty list"):
        parse_messages([])


def test_a_jsonl_log_becomes_conversations_and_the_recorded_answer_is_dropped(tmp_path):
    path = tmp_path / "my-logs.jsonl"
    lines = [
        json.dumps({"model": "x", "messages": CONVERSATIONS[0] + [{"role": "assistant", "content": "recorded"}]}),
        "",
        json.dumps(CONVERSATIONS[1]),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    convs = load_jsonl(path)
    assert [c.messages for c in convs] == [CONVERSATIONS[0], CONVERSATIONS[1]]
    w = load_workload(path)
    assert (w.name, [p.id for p in w.prompts], w.has_conversations) == ("my-logs", ["chat-1", "chat-2"], True)
    assert w.prompts[1].text == "the value of the data is"  # what lists show: the newest user message
    with pytest.raises(WorkloadError, match="chat mode only"):
        w.to_run(chat=False)


def test_a_bad_jsonl_line_names_its_number_and_nothing_is_loaded(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"messages": CONVERSATIONS[0]}) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(ChatError, match=r"bad.jsonl, line 2: not a JSON value"):
        load_jsonl(path)
    path.write_text(json.dumps({"prompt": "raw"}) + "\n", encoding="utf-8")
    with pytest.raises(ChatError, match=r"line 1: an object needs a \"messages\" array"):
        load_jsonl(path)
    with pytest.raises(WorkloadError, match="line 1"):
        load_workload(path)


def test_a_workload_json_may_hold_conversations_beside_texts():
    w = parse_workload(
        {
            "name": "mixed",
            "description": "one of each",
            "prompts": [{"id": "a", "text": "plain"}, {"id": "b", "messages": CONVERSATIONS[1]}],
        }
    )
    assert w.to_run(chat=True) == [Conversation.user("plain"), Conversation.of(CONVERSATIONS[1])]
    with pytest.raises(WorkloadError, match=r"prompt 2 \(b\).*role"):
        parse_workload(
            {"name": "x", "description": "d", "prompts": [{"id": "a", "text": "t"}, {"id": "b", "messages": [{}]}]}
        )


def test_chat_is_the_default_only_where_the_gguf_carries_a_template(chat_pair, pair):
    assert resolve_chat("auto", chat_pair[0]) is True
    assert resolve_chat("auto", pair[0]) is False
    assert resolve_chat("chat", pair[0]) is True and resolve_chat("raw", chat_pair[0]) is False


# -- rendering: the lab's template against llama-server's ---------------------------------------------


@pytest.fixture(scope="module")
def thinking_pair(tmp_path_factory):
    return write_pair(tmp_path_factory.mktemp("pair_think"), PairSpec(chat_template=THINKING_TEMPLATE))


def _apply_template(srv: LlamaServer, body: dict) -> str:
    status, resp = srv._request("POST", "/apply-template", body, timeout=60)
    assert status == 200, resp
    return resp["prompt"]


@pytest.mark.server
@pytest.mark.parametrize("which", ["chatml", "thinking"])
def test_the_lab_renders_every_conversation_as_llama_servers_chat_endpoint_does(which, chat_pair, thinking_pair):
    target, draft = chat_pair if which == "chatml" else thinking_pair
    load = LoadSettings(target, None, ctx=1024)
    argv = llama_server_argv(load, SpecSettings("none"), SamplingSettings(), server_path(), extra=["--fit", "off"])
    with EngineClient() as client, LlamaServer(argv) as srv:
        client.start()
        client.load(load)
        for messages in CONVERSATIONS:
            ours = client.chat_prompt(Conversation.of(messages))
            assert ours["prompt"] == _apply_template(srv, {"messages": messages})
            assert ours["explicit_template"] is True
        first = CONVERSATIONS[0]
        # a request's enable_thinking overrides the default on both sides
        off = client.wait_for(
            ("chat",), client.send("chat", messages=first, chat_template_kwargs={"enable_thinking": False}), 60
        )
        server_off = _apply_template(srv, {"messages": first, "chat_template_kwargs": {"enable_thinking": False}})
        assert off["prompt"] == server_off
    if which == "thinking":
        # llama-server's default: thinking on where the template supports it
        assert ours["supports_thinking"] is True and ours["enable_thinking"] is True
        assert ours["prompt"].endswith("<think>\n")
        assert off["prompt"].endswith("<think>\n\n</think>\n\n"), "thinking off must show in the rendered prompt"


@pytest.mark.slow
def test_a_model_without_a_template_gets_llama_cpps_chatml_fallback_and_says_so():
    target, _ = demo_pair()
    with EngineClient() as client:
        client.start()
        client.load(LoadSettings(target, None, ctx=512))
        rendered = client.chat_prompt(Conversation.user("hello"))
        assert rendered["explicit_template"] is False
        assert rendered["prompt"] == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
        with pytest.raises(EngineError, match="chat template: .*content"):
            client.wait_for(("chat",), client.send("chat", messages=[{"role": "user"}]), 60)


# -- running: counts identical to llama-server's /v1/chat/completions ---------------------------------


@pytest.mark.server
def test_validate_in_chat_mode_gives_the_same_counts_as_the_chat_endpoint(chat_pair, tmp_path, capsys):
    """The issue's check: spectune validate ... --chat --json at temperature 0, on a generated model with a
    chat template, a workload of conversations (multi-turn, a system message, text parts) included."""
    target, draft = chat_pair
    logs = tmp_path / "logs.jsonl"
    logs.write_text("\n".join(json.dumps({"messages": m}) for m in CONVERSATIONS) + "\n", encoding="utf-8")
    common = ["--target", str(target), "--draft", str(draft), "--ctx", "1024", "--max-tokens", "40"]
    common += ["--spec-type", "draft-simple", "--draft-n-max", "4", "--json", "--no-history"]
    rc, out, _ = run_registered(
        deploy_cli.register, ["validate", *common, "--chat", "--prompt", "def value(self): return"], capsys
    )
    assert rc == 0
    report = json.loads(out)
    rc, out, _ = run_registered(deploy_cli.register, ["validate", *common, "--workload", str(logs)], capsys)
    assert rc == 0
    logged = json.loads(out)
    for r in (report, logged):
        assert r["agree"] is True
        for row in r["per_prompt"]:
            assert row["chat"] is True
            lab, server = row["lab"], row["server"]
            assert (lab["drafted"], lab["accepted"]) == (server["drafted"], server["accepted"])
            assert row["same_text"], row
        assert r["lab"]["drafted"] > 0
    assert len(logged["per_prompt"]) == len(CONVERSATIONS)


@pytest.mark.server
def test_a_thinking_template_runs_with_the_same_counts_as_the_chat_endpoint(thinking_pair, capsys):
    """The server parses the reasoning out of the answer; what was drafted and accepted must not change."""
    target, draft = thinking_pair
    args = ["validate", "--target", str(target), "--draft", str(draft), "--ctx", "1024", "--max-tokens", "40"]
    args += ["--json", "--no-history", "--prompt", "def total_size(paths):", "--prompt", "class data:"]
    rc, out, _ = run_registered(deploy_cli.register, args, capsys)
    assert rc == 0
    report = json.loads(out)
    assert report["agree"] is True and report["lab"]["drafted"] > 0
    assert all(row["chat"] for row in report["per_prompt"])


@pytest.mark.slow
def test_the_run_command_prompts_through_the_template_by_default_on_an_instruct_model(chat_pair, capsys):
    """auto: the prompt cycle holds the rendered conversation (BOS + the ChatML frame), not the raw text."""
    target, draft = chat_pair
    args = ["run", "--target", str(target), "--draft", str(draft), "--ctx", "1024", "--max-tokens", "8", "--events"]
    counts = {}
    for mode in ("auto", "raw"):
        extra = ["--raw"] if mode == "raw" else []
        rc, out, _ = run_registered(run_cli.register, [*args, *extra, "--prompt", "the value of the data is"], capsys)
        assert rc == 0
        first = json.loads(out.splitlines()[0])
        assert first["prompt"] is True
        counts[mode] = first["n_prompt"]
    # <|im_start|>, "user", "\n", <|im_end|>, "\n", <|im_start|>, "assistant", "\n": the frame adds tokens
    assert counts["auto"] > counts["raw"] + 6, counts


@pytest.mark.slow
def test_the_tuner_measures_conversations_on_an_instruct_model(chat_pair, capsys):
    """spectune tune on a model with a template: the prompts run as conversations (auto), and the verdict
    comes from the same rendered prompts for the best and for no speculation."""
    target, draft = chat_pair
    args = ["tune", "--target", str(target), "--draft", str(draft), "--ctx", "1024", "--max-tokens", "16"]
    args += ["--k-max", "3", "--budget-s", "5", "--json", "--prompt", "def total(x):", "--prompt", "class data:"]
    rc, out, _ = run_registered(run_cli.register, args, capsys)
    assert rc == 0
    result = json.loads(out.strip().splitlines()[-1])
    assert result["runs"] > 0 and result["baseline_tps"] > 0 and "verdict_text" in result
