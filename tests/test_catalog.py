"""The catalog (resources/catalog): it loads, its numbers hold up, and broken files say what is wrong."""

from __future__ import annotations

import json
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from engine.models.catalog import BUNDLED, BUNDLED_DIR, CATALOG_DIR, CatalogError, ModelFile, Preset, load_catalog
from engine.models.demo_models import model_path
from engine.planning.recommend import budget_from_size, estimated_file_bytes, recommend

REQUIRED_FAMILIES = {
    "llama-3",
    "qwen2.5",
    "qwen2.5-coder",
    "qwen3",
    "gemma-2",
    "gemma-3",
    "mistral",
    "phi",
    "deepseek-r1-distill",
}

# (model, quant, size in GB as the hub's file listing shows it, where): the weights the plan builds from the
# catalog's numbers must come within 5% of the real files
PUBLIC_FILE_SIZES = [
    ("llama-3.1-8b-instruct", "Q4_K_M", 4.92, "https://huggingface.co/bartowski/Meta-Llama-3.1-8B-Instruct-GGUF"),
    ("llama-3.1-8b-instruct", "Q8_0", 8.54, "https://huggingface.co/bartowski/Meta-Llama-3.1-8B-Instruct-GGUF"),
    ("llama-3.2-1b-instruct", "Q8_0", 1.32, "https://huggingface.co/bartowski/Llama-3.2-1B-Instruct-GGUF"),
    ("qwen2.5-7b-instruct", "Q3_K_M", 3.81, "https://huggingface.co/bartowski/Qwen2.5-7B-Instruct-GGUF"),
    ("qwen2.5-7b-instruct", "IQ4_XS", 4.22, "https://huggingface.co/bartowski/Qwen2.5-7B-Instruct-GGUF"),
    ("qwen2.5-72b-instruct", "Q4_K_M", 47.42, "https://huggingface.co/bartowski/Qwen2.5-72B-Instruct-GGUF"),
    ("qwen2.5-coder-3b-instruct", "Q4_K_M", 1.93, "https://huggingface.co/bartowski/Qwen2.5-Coder-3B-Instruct-GGUF"),
    ("qwen2.5-coder-32b-instruct", "Q4_K_M", 19.9, "https://huggingface.co/bartowski/Qwen2.5-Coder-32B-Instruct-GGUF"),
    ("qwen2.5-coder-32b-instruct", "Q8_0", 34.8, "https://huggingface.co/bartowski/Qwen2.5-Coder-32B-Instruct-GGUF"),
    (
        "mistral-small-24b-instruct-2501",
        "Q4_K_M",
        14.3,
        "https://huggingface.co/bartowski/Mistral-Small-24B-Instruct-2501-GGUF",
    ),
    (
        "mistral-small-3.1-24b-instruct-2503",
        "Q8_0",
        25.1,
        "https://huggingface.co/unsloth/Mistral-Small-3.1-24B-Instruct-2503-GGUF",
    ),
    ("gemma-3-27b-it", "Q4_K_M", 16.5, "https://huggingface.co/ggml-org/gemma-3-27b-it-GGUF"),
    ("phi-4", "Q4_K_M", 9.05, "https://huggingface.co/bartowski/phi-4-GGUF"),
    ("phi-4", "Q3_K_M", 7.36, "https://huggingface.co/bartowski/phi-4-GGUF"),
    ("deepseek-r1-distill-qwen-32b", "Q6_K", 26.9, "https://huggingface.co/unsloth/DeepSeek-R1-Distill-Qwen-32B-GGUF"),
]


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


# -- the shipped catalog ---------------------------------------------------------------------------


def test_the_catalog_loads_and_is_big_enough(catalog):
    families = {f.id for f in catalog.families}
    assert REQUIRED_FAMILIES <= families
    hub_models = [m for m in catalog.models if m.repo != BUNDLED]
    assert len(REQUIRED_FAMILIES) >= 8 and len(hub_models) >= 30
    assert len(catalog.presets) >= 10 and len(catalog.pairings) >= 20
    assert catalog.path == CATALOG_DIR


def test_every_model_has_the_numbers_the_plan_needs_and_they_add_up(catalog):
    """A decoder with these numbers has the published parameter count: a wrong layer count, width or FFN
    size shows up here. Exact published counts agree within 0.05% (norms and biases are left out);
    rounded ones (Qwen3, Gemma 3 text) within 1.5%."""
    for m in catalog.models:
        a = m.architecture
        for name in (
            "n_layer",
            "n_embd",
            "n_head",
            "n_head_kv",
            "head_dim",
            "n_ff",
            "n_vocab",
            "n_ctx_train",
            "params",
        ):
            value = getattr(a, name)
            assert isinstance(value, int) and value > 0, (m.id, name)
        assert a.n_head % a.n_head_kv == 0 and a.llama_arch
        rounded = a.params % 1_000_000 == 0
        assert a.estimated_params() == pytest.approx(a.params, rel=0.015 if rounded else 0.0005), m.id


def test_weights_built_from_the_numbers_match_the_files_on_the_hub(catalog):
    for model_id, quant, gb, where in PUBLIC_FILE_SIZES:
        estimate = estimated_file_bytes(catalog, catalog.model(model_id), quant)
        assert estimate == pytest.approx(gb * 1e9, rel=0.05), f"{model_id} {quant}: see {where}"


def test_every_preset_pairs_a_target_with_a_smaller_draft_of_its_tokenizer(catalog):
    for p in catalog.presets:
        assert isinstance(p, Preset) and isinstance(p.target, ModelFile) and isinstance(p.draft, ModelFile)
        assert catalog.tokenizer_of(p.target.model) == catalog.tokenizer_of(p.draft.model), p.name
        target, draft = catalog.model(p.target.model), catalog.model(p.draft.model)
        assert draft.architecture.params < target.architecture.params, p.name
        assert p.target == catalog.model_file(p.target.model, p.target.quant)
        assert p.draft == catalog.model_file(p.draft.model, p.draft.quant)
        assert p.description
    for pairing in catalog.pairings:
        assert catalog.tokenizer_of(pairing.target) == catalog.tokenizer_of(pairing.draft)


def test_presets_people_ask_for_by_name(catalog):
    p = catalog.preset("qwen2.5-coder-7b+0.5b-q4km")
    assert (p.target.model, p.target.quant, p.draft.model) == (
        "qwen2.5-coder-7b-instruct",
        "Q4_K_M",
        "qwen2.5-coder-0.5b-instruct",
    )
    assert p.target.repo == "bartowski/Qwen2.5-Coder-7B-Instruct-GGUF"
    assert p.target.filename == "Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf"
    assert p.draft.filename == "qwen2.5-coder-0.5b-instruct-q8_0.gguf"
    with pytest.raises(CatalogError, match="no preset 'nope'.*qwen2.5-coder-7b\\+0.5b-q4km"):
        catalog.preset("nope")
    assert issubclass(CatalogError, ValueError)


def test_the_demo_presets_name_the_bundled_files(catalog):
    for quant, name in (("f16", "spectune-demo-f16"), ("q8_0", "spectune-demo-q8_0")):
        p = catalog.preset(name)
        for role, f in (("target", p.target), ("draft", p.draft)):
            assert f.bundled and f.repo == BUNDLED
            assert f.bundled_path == model_path(role, quant) and f.bundled_path.parent == BUNDLED_DIR
    assert catalog.model_file("qwen3-8b", "Q4_K_M").bundled_path is None


def test_file_names_and_repositories_look_like_the_hub(catalog):
    for m in catalog.models:
        if m.repo != BUNDLED:
            assert re.fullmatch(r"[A-Za-z0-9-]+/[A-Za-z0-9._-]+-GGUF", m.repo), m.repo
        for quant, filename in m.files.items():
            assert filename.endswith(".gguf") and "/" not in filename
            assert quant.lower() in filename.lower(), (m.id, quant, filename)
        assert set(m.checked) <= set(m.files)
    with pytest.raises(CatalogError, match="no Q2_K file.*known: Q4_K_M"):
        catalog.model_file("qwen3-8b", "Q2_K")


def test_published_speedups_name_their_source(catalog):
    measured = [s for p in catalog.pairings for s in p.speedups]
    assert len(measured) >= 4
    for s in measured:
        assert s.source.startswith("https://") and s.setup and 0.5 < s.speedup < 5


def test_quant_table_is_llama_cpps(catalog):
    q4 = catalog.quant("Q4_K_M")
    assert (q4.weight_type, q4.ppl_increase, q4.reference) == ("Q4_K", 0.1754, "Llama-3-8B")
    assert q4.bits_per_weight == pytest.approx(4.58 * 2**30 * 8 / 8_030_261_248, abs=1e-3)
    ranked = [catalog.quant(n) for n in ("Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0")]
    assert [q.bits_per_weight for q in ranked] == sorted(q.bits_per_weight for q in ranked)
    assert [q.ppl_increase for q in ranked] == sorted((q.ppl_increase for q in ranked), reverse=True)


def test_quant_comments_match_the_pinned_quantize_source(catalog):
    """Every quantize_comment is the QUANT_OPTIONS comment of the pinned llama.cpp, verbatim."""
    from engine.llama.install import sdist_path

    sdist = sdist_path()
    if not sdist.exists():
        pytest.skip(f"the pinned llama-cpp-python source archive is not at {sdist} (scripts/setup.sh downloads it)")
    with tarfile.open(sdist) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("vendor/llama.cpp/tools/quantize/quantize.cpp"))
        source = tar.extractfile(member).read().decode()
    options = dict(re.findall(r'\{\s*"(\w+)",\s*LLAMA_FTYPE_\w+,\s*"([^"]*)"', source))
    for q in catalog.quants:
        assert q.name in options, q.name
        assert q.quantize_comment == options[q.name].strip(), q.name


# -- broken catalogs give specific errors ----------------------------------------------------------------


@pytest.fixture
def copy(tmp_path) -> Path:
    dest = tmp_path / "catalog"
    shutil.copytree(CATALOG_DIR, dest)
    return dest


def edit(path: Path, change) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc)
    path.write_text(json.dumps(doc), encoding="utf-8")


def expect(copy: Path, pattern: str) -> None:
    with pytest.raises(CatalogError, match=pattern):
        load_catalog(copy)


def test_a_copy_loads_like_the_original(copy):
    assert len(load_catalog(copy).models) == len(load_catalog().models)


def test_invalid_json_names_the_file_and_the_place(copy):
    path = copy / "families" / "qwen3.json"
    path.write_text(path.read_text(encoding="utf-8").replace('"n_layer": 28', '"n_layer" 28', 1), encoding="utf-8")
    expect(copy, r"qwen3\.json: not valid JSON: Expecting ':' delimiter at line \d+, column \d+")


def test_a_missing_number_names_the_model(copy):
    edit(copy / "families" / "llama-3.json", lambda d: d["models"][2]["arch"].pop("n_ff"))
    expect(copy, r"llama-3\.json: models\[2\] \(model 'llama-3.1-8b-instruct'\): arch: missing 'n_ff'")


@pytest.mark.parametrize(
    "value, message",
    [
        (0, "'n_layer' must be positive, found 0"),
        (True, "'n_layer' must be int, found true"),
        ("32", "'n_layer' must be int, found \"32\""),
    ],
)
def test_a_bad_number_says_what_is_wrong(copy, value, message):
    edit(copy / "families" / "llama-3.json", lambda d: d["models"][0]["arch"].update(n_layer=value))
    expect(copy, re.escape(f"(model 'llama-3.2-1b-instruct'): arch: {message}"))


def test_a_misspelt_key_is_not_ignored(copy):
    edit(copy / "families" / "phi.json", lambda d: d["models"][0]["gguf"].update(quant=["Q4_K_M"]))
    expect(copy, r"phi\.json: .*'phi-3\.5-mini-instruct'\): gguf: unknown key 'quant'")


def test_a_pattern_with_an_unknown_placeholder(copy):
    edit(copy / "families" / "qwen3.json", lambda d: d["models"][1]["gguf"].update(file_pattern="Qwen3-{size}.gguf"))
    expect(copy, r"'qwen3-1\.7b'\): gguf: 'file_pattern' 'Qwen3-\{size\}\.gguf' may only use \{quant\} and")


def test_a_quant_not_in_the_quant_table(copy):
    edit(copy / "families" / "gemma-2.json", lambda d: d["models"][0]["gguf"]["quants"].append("Q4_K_XL"))
    expect(copy, r"gemma-2\.json: .*'gemma-2-2b-it'\): gguf: quant \"Q4_K_XL\" is not in quants\.json")


def test_a_model_defined_twice(copy):
    edit(copy / "families" / "qwen3.json", lambda d: d["models"].append(dict(d["models"][0])))
    expect(copy, r"qwen3\.json: model 'qwen3-0\.6b' is already defined in .*qwen3\.json")


def test_a_preset_with_an_unknown_model_or_quant(copy):
    edit(copy / "presets.json", lambda d: d["presets"][2].update(target="qwen9-7b"))
    expect(copy, r"presets\.json: preset 'qwen2\.5-coder-7b\+0\.5b-q4km': target 'qwen9-7b' is not a model")
    shutil.copy(CATALOG_DIR / "presets.json", copy / "presets.json")
    edit(copy / "presets.json", lambda d: d["presets"][2].update(draft_quant="Q2_K"))
    expect(copy, r"preset 'qwen2\.5-coder-7b\+0\.5b-q4km': draft 'qwen2\.5-coder-0\.5b-instruct' has no Q2_K file")


def test_a_preset_across_tokenizers_is_refused(copy):
    edit(copy / "presets.json", lambda d: d["presets"][2].update(draft="llama-3.2-1b-instruct", draft_quant="Q8_0"))
    expect(
        copy,
        r"preset 'qwen2\.5-coder-7b\+0\.5b-q4km': the draft's tokenizer 'llama-3\.1' is not the "
        r"target's 'qwen2\.5'; llama\.cpp would refuse the pair",
    )


def test_a_pairing_with_a_draft_bigger_than_its_target(copy):
    edit(
        copy / "families" / "qwen3.json", lambda d: d["pairings"].append({"target": "qwen3-0.6b", "draft": "qwen3-8b"})
    )
    expect(copy, r"qwen3\.json: pairing qwen3-0\.6b \+ qwen3-8b: the draft is not smaller than the target")


def test_a_speedup_without_a_source(copy):
    edit(copy / "families" / "llama-3.json", lambda d: d["pairings"][0]["speedups"][0].update(source="issue 5877"))
    expect(copy, r"llama-3\.json: pairings\[0\]\.speedups\[0\]: 'source' must be an http\(s\) URL")


def test_wrong_format_and_missing_files(copy, tmp_path):
    edit(copy / "quants.json", lambda d: d.update(format=2))
    expect(copy, r"quants\.json: format 2 is not one this SpecTune reads \(it reads 1\)")
    (copy / "quants.json").unlink()
    expect(copy, r"quants\.json: catalog file missing")
    with pytest.raises(CatalogError, match="catalog folder missing"):
        load_catalog(tmp_path / "nowhere")


def _add_eagle3(doc: dict) -> None:
    """An EAGLE-3 draft file for Qwen3 8B in the qwen3 family: same tokenizer, far fewer parameters."""
    head = json.loads(json.dumps(doc["models"][0]))
    head.update(id="qwen3-8b-eagle3", name="Qwen3 8B EAGLE-3 draft", hf_model="")
    head.pop("config_source", None)
    head["arch"].update(llama_arch="eagle3", n_layer=1, n_embd=4096, n_head=32, head_dim=128, params=400000000)
    head["gguf"].update(repo="org/Qwen3-8B-EAGLE3-GGUF", file_pattern="Qwen3-8B-EAGLE3-{quant}.gguf", quants=["Q8_0"])
    doc["models"].append(head)


def test_an_eagle3_file_is_never_a_plain_draft(copy):
    """It speculates only with draft-eagle3: drafts_for (the recommendations' drafts) leaves it out, and a
    preset that pairs it as a draft model is refused."""
    edit(copy / "families" / "qwen3.json", _add_eagle3)
    catalog = load_catalog(copy)
    assert catalog.model("qwen3-8b-eagle3").is_draft_head
    assert "qwen3-8b-eagle3" not in {m.id for m in catalog.drafts_for("qwen3-8b")}
    assert "qwen3-0.6b" in {m.id for m in catalog.drafts_for("qwen3-8b")}
    r = recommend(catalog, budget_from_size("24GiB", 1008), ctx=4096, family="qwen3")
    assert r.recommended
    assert not {c.target.model for c in r.recommended + r.near_misses} & {"qwen3-8b-eagle3"}
    assert not {c.draft.model for c in r.recommended + r.near_misses} & {"qwen3-8b-eagle3"}
    edit(copy / "presets.json", lambda d: d["presets"][9].update(draft="qwen3-8b-eagle3"))
    expect(
        copy,
        r"preset 'qwen3-8b\+0\.6b-q4km': the draft 'qwen3-8b-eagle3' is a draft head \(eagle3\), which llama\.cpp "
        r"runs only through its own method; pairings and presets pair plain models",
    )
