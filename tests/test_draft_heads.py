"""Which methods a pair can run (engine.models.draft_heads), on generated files of every kind, and the
heads themselves run through specrt: draft-mtp on a glm4moe model with an MTP block, draft-eagle3 on an
EAGLE-3 draft, draft-dflash / draft-dspark on DFlash and DSpark drafts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.core.settings import LoadSettings, SamplingSettings, SettingsError, SpecSettings
from engine.models.draft_heads import (
    MTP_ARCHITECTURES,
    NOT_IN_ENGINE,
    kind_label,
    method_verdicts,
    pair_verdicts,
    spec_type_reason,
    unavailable,
)
from engine.models.gguf_inspect import inspect_gguf
from engine.models.synthetic import ModelShape
from testmodels.heads import MTPModelSpec, write_dflash_draft, write_eagle3_draft, write_mtp_model

from .conftest import PROMPTS

GREEDY = SamplingSettings(temp=0.0)
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def heads(tmp_path_factory, pair) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("heads")
    target, draft = pair
    return {
        "target": target,
        "draft": draft,
        "mtp": write_mtp_model(out / "mtp.gguf"),
        "eagle3": write_eagle3_draft(out / "eagle3.gguf"),
        "dflash": write_dflash_draft(out / "dflash.gguf"),
        "dspark": write_dflash_draft(out / "dspark.gguf", dspark=True),
    }


def reasons(target: Path | None, draft: Path | None) -> dict[str, str]:
    """method -> why not, for the methods with a drafter (the n-gram ones are checked separately)."""
    verdicts = pair_verdicts(target, draft)
    assert all(verdicts[m].runs for m in verdicts if m.startswith("ngram-"))  # every target here generates
    return {m: v.reason for m, v in verdicts.items() if m.startswith("draft-")}


def test_the_generated_files_are_what_llama_cpp_takes_them_for(heads):
    roles = {k: inspect_gguf(p).speculative_role for k, p in heads.items()}
    assert roles == {
        "target": None,
        "draft": None,
        "mtp": "mtp",
        "eagle3": "eagle3",
        "dflash": "dflash",
        "dspark": "dspark",
    }
    assert inspect_gguf(heads["mtp"]).nextn_layers == 1


def test_a_plain_pair_runs_draft_simple_and_no_head(heads):
    r = reasons(heads["target"], heads["draft"])
    assert r["draft-simple"] == ""
    assert r["draft-mtp"] == "draft-mtp needs a target with an MTP head; this model has none"
    assert r["draft-eagle3"] == "draft-eagle3 needs an EAGLE-3 draft file; the draft is an ordinary model"
    assert r["draft-dflash"] == "draft-dflash needs a DFlash draft file; the draft is an ordinary model"
    assert r["draft-dspark"] == "draft-dspark needs a DSpark draft file; the draft is an ordinary model"


def test_without_a_draft_only_the_ngram_methods_run(heads):
    r = reasons(heads["target"], None)
    assert r["draft-simple"] == "draft-simple needs a draft model"
    assert r["draft-eagle3"] == "draft-eagle3 needs an EAGLE-3 draft file; no draft model is chosen"
    assert all(r.values())


def test_a_model_with_an_mtp_head_drafts_alone(heads):
    r = reasons(heads["mtp"], None)
    assert r["draft-mtp"] == "" and r["draft-simple"] == "draft-simple needs a draft model"
    # with a draft model loaded, specrt skips the MTP layers: draft-mtp is refused, draft-simple runs
    r = reasons(heads["mtp"], heads["draft"])
    assert r["draft-simple"] == "" and "clear the draft" in r["draft-mtp"]


def test_an_mtp_head_of_an_architecture_llama_cpp_skips_is_named():
    glm4 = SimpleNamespace(architecture="glm4", speculative_role="mtp")
    reason = method_verdicts(glm4, None)["draft-mtp"].reason
    assert reason.startswith("draft-mtp needs an MTP head of an architecture the pinned llama.cpp runs it for (")
    assert reason.endswith("this model is glm4") and "glm4moe" in reason
    assert kind_label(glm4) == "has MTP layers, but the pinned llama.cpp does not run draft-mtp for glm4"


def test_a_draft_head_runs_only_its_own_method(heads):
    r = reasons(heads["target"], heads["eagle3"])
    assert r["draft-eagle3"] == ""
    assert r["draft-simple"] == (
        "draft-simple needs an ordinary draft model; the draft is an EAGLE-3 draft (use draft-eagle3)"
    )
    assert r["draft-dflash"] == "draft-dflash needs a DFlash draft file; the draft is an EAGLE-3 draft"
    r = reasons(heads["target"], heads["dspark"])
    assert r["draft-dflash"] == "draft-dflash needs a DFlash draft file; the draft is a DSpark draft"
    assert r["draft-dspark"] == ""
    assert reasons(heads["target"], heads["dflash"])["draft-dflash"] == ""
    assert not NOT_IN_ENGINE, "every type the pinned llama.cpp runs, the engine runs"


def test_a_draft_head_as_target_runs_nothing(heads):
    verdicts = pair_verdicts(heads["eagle3"], None)
    assert not any(v.runs for v in verdicts.values())
    assert verdicts["ngram-mod"].reason.startswith("the target is an EAGLE-3 draft, which only drafts for another")


def test_preflight_refuses_a_head_as_target_and_carries_the_verdicts(heads):
    from engine.planning.advice.preflight import preflight

    check = preflight(heads["dflash"], None, 512, None)
    assert check.refusal == (
        "The target is a DFlash draft, which only drafts for another model; choose the model it was made for as "
        "the target"
    )
    check = preflight(heads["mtp"], None, 512, None)
    assert check.refusal is None and check.methods["draft-mtp"].runs and not check.methods["draft-simple"].runs


def test_a_head_made_for_another_target_is_refused(tmp_path, heads):
    wide = write_eagle3_draft(tmp_path / "wide.gguf", ModelShape(n_embd=256, n_head=4, n_head_kv=2, n_ff=512))
    assert reasons(heads["target"], wide)["draft-eagle3"] == (
        "this EAGLE-3 draft was made for a target 256 wide; this target is 128 wide"
    )
    deep = write_dflash_draft(tmp_path / "deep.gguf", ModelShape(n_layer=8))
    assert reasons(heads["target"], deep)["draft-dflash"] == (
        "this DFlash draft reads the target's layer 7; this target has 4 layers"
    )


def test_a_setting_is_refused_with_the_reason_of_its_first_type_that_cannot_run(heads):
    verdicts = pair_verdicts(heads["target"], None)
    assert spec_type_reason("ngram-mod,draft-simple", verdicts) == "draft-simple needs a draft model"
    assert spec_type_reason("ngram-mod", verdicts) == "" and spec_type_reason("none", verdicts) == ""
    with pytest.raises(SettingsError, match="draft-simple needs a draft model"):
        SpecSettings("ngram-simple,draft-simple").validate(unavailable=unavailable(verdicts))
    SpecSettings("ngram-simple").validate(unavailable=unavailable(verdicts))


def test_nothing_chosen_says_nothing():
    assert all(v.runs for v in method_verdicts(None, None).values())
    assert all(v.runs for v in pair_verdicts(None, None).values())


def test_the_mtp_architectures_are_those_of_the_pinned_llama_cpp():
    """Every architecture whose graph builds an MTP head (LLM_GRAPH_TYPE_DECODER_MTP) in src/models/*.cpp,
    named as src/llama-arch.cpp names it."""
    from engine.llama.install import LlamaInstallError, source_tree

    try:
        src = source_tree() / "src"
    except LlamaInstallError as exc:
        pytest.skip(f"the pinned llama.cpp sources are not available: {exc}")
    classes = set()
    for f in (src / "models").glob("*.cpp"):
        text = f.read_text(encoding="utf-8", errors="replace")
        if "gtype == LLM_GRAPH_TYPE_DECODER_MTP" in text:
            classes |= set(re.findall(r"llama_model_(\w+)::build_arch_graph", text))
    factory = dict(
        re.findall(r"case (LLM_ARCH_\w+):\s*return new llama_model_(\w+)\(", (src / "llama-model.cpp").read_text())
    )
    names = dict(re.findall(r"\{\s*(LLM_ARCH_\w+),\s*\"([^\"]+)\"\s*\}", (src / "llama-arch.cpp").read_text()))
    found = {names[arch] for arch, cls in factory.items() if cls in classes}
    assert found == MTP_ARCHITECTURES


# -- the heads through specrt -------------------------------------------------------------------------


def generate(engine, spec: SpecSettings, prompt: str, n: int = 48, baseline: bool = False):
    engine.set_spec(spec)
    engine.set_sampling(GREEDY)
    engine.begin(prompt, n, baseline)
    tokens, cycles = [], []
    while (c := engine.step()) is not None:
        tokens += c.tokens
        cycles.append(c)
    return tokens, cycles


def test_draft_mtp_runs_on_a_generated_glm4moe_model(tmp_path):
    from engine.runtime.binding import Engine

    exact = write_mtp_model(tmp_path / "mtp0.gguf")
    noisy = write_mtp_model(tmp_path / "mtp1.gguf", MTPModelSpec(divergence=0.5))
    rates = []
    for path in (exact, noisy):
        with Engine(LoadSettings(path, None, ctx=512)) as e:
            assert not e.has_draft  # the MTP context is no draft model
            drafted = accepted = 0
            for prompt in PROMPTS[:2]:
                base, _ = generate(e, SpecSettings("none"), prompt, baseline=True)
                spec, cycles = generate(e, SpecSettings("draft-mtp", draft_n_max=3), prompt)
                assert spec == base, "draft-mtp changed the text at temperature 0"
                drafted += sum(c.drafted for c in cycles)
                accepted += sum(c.accepted for c in cycles)
        assert drafted > 0
        rates.append(accepted / drafted)
    assert rates[0] == 1.0  # the head predicts exactly the bigram the target is at divergence 0
    assert rates[1] < 1.0


def test_draft_eagle3_runs_on_a_generated_eagle3_draft(heads):
    from engine.runtime.binding import Engine

    with Engine(LoadSettings(heads["target"], heads["eagle3"], ctx=512)) as e:
        assert e.has_draft
        base, _ = generate(e, SpecSettings("none"), PROMPTS[0], baseline=True)
        spec, cycles = generate(e, SpecSettings("draft-eagle3", draft_n_max=3), PROMPTS[0])
    assert spec == base and sum(c.drafted for c in cycles) > 0


@pytest.mark.server
@pytest.mark.parametrize("kind", ["dflash", "dspark"])
@pytest.mark.parametrize("k", [3, 6])
def test_specrt_drafts_with_dflash_files_as_the_bundled_llama_server_does(heads, kind, k):
    """A block draft is loaded with its own type (an output per block position), so specrt drafts with it:
    the same text as without speculation, and llama-server's drafted and accepted counts."""
    from engine.deploy.export import export_llama_server
    from engine.llama.server import LlamaServer, server_summary
    from engine.runtime.binding import Engine

    load = LoadSettings(heads["target"], heads[kind], ctx=512, threads=1, threads_batch=1)
    spec = SpecSettings(f"draft-{kind}", draft_n_max=k)
    with LlamaServer(export_llama_server(load, spec, GREEDY).argv) as server:
        theirs = [server_summary(server.complete(p, 24, temperature=0.0)) for p in PROMPTS[:2]]
    with Engine(load) as e:
        for prompt, srv in zip(PROMPTS[:2], theirs):
            base, _ = generate(e, SpecSettings("none"), prompt, n=24, baseline=True)
            tokens, cycles = generate(e, spec, prompt, n=24)
            assert tokens == base, "a DFlash draft changed the text at temperature 0"
            ours = (sum(c.drafted for c in cycles), sum(c.accepted for c in cycles))
            assert ours == (srv["drafted"], srv["accepted"])
    assert sum(s["drafted"] for s in theirs) > 0


# -- the worker and the command line refuse what the pair cannot run ------------------------------------


@pytest.mark.slow
def test_the_worker_refuses_a_method_the_pair_cannot_run_and_goes_on(client, heads):
    """draft-dflash on an ordinary draft used to abort the worker process (llama.cpp's GGML_ASSERT)."""
    from engine.runtime.client import EngineError

    client.load(LoadSettings(heads["target"], heads["draft"], ctx=512))
    expected = unavailable(pair_verdicts(heads["target"], heads["draft"]))
    for method in ("draft-dflash", "draft-dspark", "draft-eagle3", "draft-mtp", "ngram-mod,draft-eagle3"):
        with pytest.raises(EngineError) as refused:
            client.configure(spec={"spec_type": method})
        assert refused.value.kind == "invalid_settings"
        assert str(refused.value) == expected[method.split(",")[-1]]
    events = list(client.generate(PROMPTS[0], 16, spec={"spec_type": "draft-simple"}, sampling={"temp": 0.0}))
    assert events[-1]["event"] == "done" and events[-1]["summary"]["drafted"] > 0


@pytest.mark.slow
def test_the_worker_runs_draft_mtp_on_a_target_with_an_mtp_head(client, heads):
    client.load(LoadSettings(heads["mtp"], None, ctx=512))
    spec = {"spec_type": "draft-mtp", "draft_n_max": 3}
    events = list(client.generate(PROMPTS[1], 24, spec=spec, sampling={"temp": 0.0}))
    assert events[-1]["event"] == "done" and events[-1]["summary"]["drafted"] > 0


def spectune(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=600, cwd=ROOT
    )


@pytest.mark.slow
def test_spectune_run_with_a_head(heads):
    common = ("--prompt", PROMPTS[0], "--max-tokens", "24", "--ctx", "512", "--json")
    r = spectune("run", "--target", str(heads["mtp"]), "--spec-type", "draft-mtp", *common)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["drafted"] > 0
    # an EAGLE-3 draft without --spec-type: its own method, not draft-simple
    r = spectune("run", "--target", str(heads["target"]), "--draft", str(heads["eagle3"]), *common)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout.splitlines()[-1])
    assert s["spec"]["spec_type"] == "draft-eagle3" and s["drafted"] > 0


@pytest.mark.slow
def test_spectune_run_refuses_a_method_the_pair_cannot_run(heads):
    r = spectune("run", "--target", str(heads["target"]), "--draft", str(heads["draft"]), "--spec-type",
                 "draft-dflash", "--prompt", "x")  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("spectune: error")
    assert r.stderr.endswith(": draft-dflash needs a DFlash draft file; the draft is an ordinary model\n")


@pytest.mark.slow
def test_spectune_tune_measures_a_head_by_its_own_method(heads):
    r = spectune("tune", "--target", str(heads["target"]), "--draft", str(heads["eagle3"]), "--prompt", PROMPTS[0],
                 "--max-tokens", "16", "--ctx", "512", "--budget-s", "1", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    settings = {row["setting"] for row in json.loads(r.stdout.splitlines()[-1])["candidates"]}
    assert {"draft-eagle3 K=2", "draft-eagle3 K=3", "draft-eagle3 K=4"} <= settings
    assert not any("draft-simple" in s for s in settings)


def test_the_generator_command_writes_each_kind(tmp_path):
    for kind, role in (("mtp", "mtp"), ("eagle3", "eagle3"), ("dflash", "dflash"), ("dspark", "dspark")):
        out = tmp_path / f"{kind}.gguf"
        r = subprocess.run(
            [sys.executable, "-m", "testmodels.heads", kind, str(out)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == {"kind": kind, "path": str(out)}
        assert inspect_gguf(out).speculative_role == role
