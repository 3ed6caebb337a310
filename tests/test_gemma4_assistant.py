"""Gemma 4's separate draft file (general.architecture "gemma4-assistant"), end to end: the generator, what
SpecTune makes of the file, specrt drafting with it as llama-server's `-md A --spec-type draft-mtp` does,
the exported command and the memory plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.models.draft_heads import kind_label, pair_verdicts
from engine.models.gguf_inspect import inspect_gguf
from testmodels.heads import main as write_head
from testmodels.heads import write_gemma4_assistant
from testmodels.synthetic import main as write_synthetic_pair

from .conftest import PROMPTS
from .test_draft_heads import generate  # one greedy generation through specrt: tokens and cycles

GREEDY = SamplingSettings(temp=0.0)


@pytest.fixture(scope="module")
def files(tmp_path_factory, pair) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("gemma4-assistant")
    assert write_synthetic_pair([str(out / "g4"), "--gemma4"]) == 0
    assert write_synthetic_pair([str(out / "narrow"), "--gemma4", "--n-embd", "64"]) == 0
    return {
        "target": out / "g4" / "target.gguf",
        "draft": out / "g4" / "draft.gguf",
        "assistant": write_gemma4_assistant(out / "assistant.gguf", out / "g4" / "target.gguf"),
        "narrow_target": out / "narrow" / "target.gguf",
        "llama_target": pair[0],
    }


def reasons(target: Path, draft: Path | None) -> dict[str, str]:
    return {m: v.reason for m, v in pair_verdicts(target, draft).items() if m.startswith("draft-")}


# -- the file ------------------------------------------------------------------------------------------


def test_the_generated_assistant_is_a_separate_draft_file_for_its_target(files):
    info = inspect_gguf(files["assistant"])
    target = inspect_gguf(files["target"])
    assert info.architecture == "gemma4-assistant"
    assert info.speculative_role == "gemma4-assistant"  # not "mtp": it is no model with its own head
    assert info.arch_value("embedding_length_out") == target.n_embd != info.n_embd
    assert info.vocab.n_tokens == target.vocab.n_tokens
    label = kind_label(info)
    assert label is not None and "gemma4 target" in label and "draft-mtp" in label


def test_the_generator_command_needs_a_gemma4_target(tmp_path, files, capsys):
    out = tmp_path / "a.gguf"
    assert write_head(["gemma4-assistant", str(out), "--target", str(files["target"])]) == 0
    assert inspect_gguf(out).speculative_role == "gemma4-assistant"
    with pytest.raises(SystemExit):
        write_head(["gemma4-assistant", str(tmp_path / "b.gguf")])
    assert "needs --target" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        write_head(["gemma4-assistant", str(tmp_path / "c.gguf"), "--target", str(files["llama_target"])])
    assert "not a gemma4 model" in capsys.readouterr().err


# -- the verdicts ----------------------------------------------------------------------------------------


def test_a_gemma4_target_with_its_assistant_runs_draft_mtp_only(files):
    why = reasons(files["target"], files["assistant"])
    assert why["draft-mtp"] == ""
    assert "use draft-mtp" in why["draft-simple"]
    assert all(why[m] for m in ("draft-eagle3", "draft-dflash", "draft-dspark"))


def test_an_assistant_fits_only_a_gemma4_target_of_its_width(files):
    assert "drafts only for the gemma4 model" in reasons(files["llama_target"], files["assistant"])["draft-mtp"]
    assert "64 wide" in reasons(files["narrow_target"], files["assistant"])["draft-mtp"]
    # as the target it generates nothing
    assert all("only drafts for another model" in r for r in reasons(files["assistant"], None).values())


def test_draft_mtp_on_a_gemma4_target_asks_for_its_assistant(files):
    assert "assistant" in reasons(files["target"], None)["draft-mtp"]
    assert "assistant" in reasons(files["target"], files["draft"])["draft-mtp"]
    assert reasons(files["target"], files["draft"])["draft-simple"] == ""


# -- the export and the plan ------------------------------------------------------------------------------


def test_the_export_loads_the_assistant_as_the_draft_of_draft_mtp(files):
    from engine.deploy.export import export_llama_server

    load = LoadSettings(files["target"], files["assistant"], ctx=512)
    argv = export_llama_server(load, SpecSettings("draft-mtp", draft_n_max=3), GREEDY).argv
    assert argv[argv.index("--spec-type") + 1] == "draft-mtp"
    assert argv[argv.index("-md") + 1] == str(files["assistant"])


def test_the_plan_gives_the_assistant_no_kv_cache_as_llama_cpp_does(files):
    from engine.planning.memory.memory_plan import load_options, plan_memory
    from engine.runtime.binding import Engine

    target, assistant = inspect_gguf(files["target"]), inspect_gguf(files["assistant"])
    plan = plan_memory(target, 2048, draft=assistant, **load_options(target, assistant))
    draft_items = {i.kind: i.bytes for i in plan.items if i.model == "draft"}
    assert "compute" in draft_items and "kv_cache" not in draft_items
    assert any("keeps no KV cache" in n for n in plan.notes)
    with Engine(LoadSettings(files["target"], files["assistant"], ctx=2048, threads=1, threads_batch=1)) as e:
        theirs = [m for m in e.memory() if m["model"] == "draft"]
    assert sum(m["context_bytes"] for m in theirs) == 0
    assert sum(m["model_bytes"] for m in theirs) == draft_items["weights"]


# -- specrt against llama-server ---------------------------------------------------------------------------


def test_the_speed_model_drafts_with_an_assistant_without_feeding_it_the_verified_tokens(files):
    """An assistant attends over the target's cache and keeps none: a step costs its K draft passes and the
    verify, with no pass of the verified tokens through it, which an ordinary draft of the same cost needs."""
    import dataclasses

    from engine.planning.speed.device_speed import DeviceSpeed
    from engine.planning.speed.model_cost import model_cost
    from engine.planning.speed.speed_model import predict

    target, assistant = model_cost(inspect_gguf(files["target"])), model_cost(inspect_gguf(files["assistant"]))
    assert assistant.reads_target_cache and not target.reads_target_cache
    ordinary = dataclasses.replace(assistant, reads_target_cache=False)
    cpu = DeviceSpeed("CPU", 20e9, 100e9, 0.5, overlap=False, reread=0.4)
    with_head, as_draft = (predict(target, d, cpu, acceptance=0.7, k_max=6) for d in (assistant, ordinary))
    assert all(with_head.speedup_by_k[k] > as_draft.speedup_by_k[k] for k in range(1, 7))


def test_specrt_refuses_other_draft_types_with_an_assistant(files):
    from engine.runtime.binding import Engine

    with Engine(LoadSettings(files["target"], files["assistant"], ctx=512, threads=1, threads_batch=1)) as e:
        with pytest.raises(Exception, match="draft-mtp only"):
            e.set_spec(SpecSettings("draft-simple", draft_n_max=3))


@pytest.mark.server
@pytest.mark.parametrize("k", [3, 5])
def test_specrt_drafts_with_an_assistant_as_the_bundled_llama_server_does(files, k):
    """`-md assistant --spec-type draft-mtp`: the same text as without speculation, and llama-server's drafted
    and accepted counts."""
    from engine.deploy.export import export_llama_server
    from engine.llama.server import LlamaServer, server_summary
    from engine.runtime.binding import Engine

    load = LoadSettings(files["target"], files["assistant"], ctx=512, threads=1, threads_batch=1)
    spec = SpecSettings("draft-mtp", draft_n_max=k)
    prompts = PROMPTS[:3]
    with LlamaServer(export_llama_server(load, spec, GREEDY).argv) as server:
        theirs = [server_summary(server.complete(p, 32, temperature=0.0)) for p in prompts]
    with Engine(load) as e:
        for prompt, srv in zip(prompts, theirs):
            base, _ = generate(e, SpecSettings("none"), prompt, 32, baseline=True)
            tokens, cycles = generate(e, spec, prompt, 32)
            assert tokens == base, "the assistant changed the text at temperature 0"
            ours = (sum(c.drafted for c in cycles), sum(c.accepted for c in cycles))
            assert ours == (srv["drafted"], srv["accepted"])
    assert sum(s["accepted"] for s in theirs) > 0


def test_the_targets_layers_set_the_assistants_acceptance(tmp_path, files):
    """The assistant predicts the target's bigram: a target with fewer active layers accepts more."""
    from engine.runtime.binding import Engine

    assert write_synthetic_pair([str(tmp_path / "near"), "--gemma4", "--draft-layers", "2", "--divergence", "0"]) == 0
    near = tmp_path / "near" / "target.gguf"
    rates = []
    for target, assistant in ((near, write_gemma4_assistant(tmp_path / "a.gguf", near)), (files["target"], None)):
        load = LoadSettings(target, assistant or files["assistant"], ctx=512, threads=1, threads_batch=1)
        with Engine(load) as e:
            _, cycles = generate(e, SpecSettings("draft-mtp", draft_n_max=3), PROMPTS[0], 48)
        rates.append(sum(c.accepted for c in cycles) / sum(c.drafted for c in cycles))
    assert rates[0] > 0.5 > rates[1], rates  # measured: 0.59 and 0.25
