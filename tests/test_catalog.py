"""The catalog (resources/catalog): it loads, its numbers hold up, and broken files say what is wrong."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from engine.models.catalog import BUNDLED, BUNDLED_DIR, CATALOG_DIR, CatalogError, ModelFile, Preset, load_catalog
from engine.models.compat import SPEC_VOCAB_MAX_SIZE_DIFFERENCE, check_pair, vocab_compatibility
from engine.models.demo_models import model_path
from engine.models.gguf_inspect import VocabInfo, inspect_gguf
from engine.planning.advice.catalog_models import CatalogModels, estimated_file_bytes
from engine.planning.advice.recommend import recommend
from engine.planning.memory.budget import budget_from_size

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
    "gpt-oss",
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
    # mixtures of experts: exact byte counts a public installer checks its downloads against
    (
        "qwen3-coder-30b-a3b-instruct",
        "Q4_K_M",
        18.556689568,
        "https://github.com/jawanjalkaustubh/strata-code/blob/53cb0570786e46964a46471ef2bcf55c40bcab65/scripts/mac/setup.sh",
    ),
    (
        "qwen3-coder-30b-a3b-instruct",
        "Q6_K",
        25.092535456,
        "https://github.com/jawanjalkaustubh/strata-code/blob/53cb0570786e46964a46471ef2bcf55c40bcab65/scripts/mac/setup.sh",
    ),
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
        assert a.n_head % a.n_head_kv == 0 and a.architecture
        rounded = a.params % 1_000_000 == 0
        assert a.estimated_params() == pytest.approx(a.params, rel=0.015 if rounded else 0.0005), m.id


def test_weights_built_from_the_numbers_match_the_files_on_the_hub(catalog):
    """The plan's weights come from the numbers, not from a recorded size (which would prove nothing)."""
    models = CatalogModels(catalog)
    for model_id, quant, gb, where in PUBLIC_FILE_SIZES:
        estimate = models.info(catalog.model(model_id), quant).tensor_bytes
        assert estimate == pytest.approx(gb * 1e9, rel=0.05), f"{model_id} {quant}: see {where}"


def test_recorded_sizes_agree_with_the_numbers(catalog):
    """Every exact size the catalog records is within 6% of the weights its numbers give; the worst is
    Qwen3-30B-A3B Q3_K_S, 5.1% over (llama-quantize's Q3_K_S mix leaves its experts leaner than the
    Llama-3-8B average the quant table gives). estimated_file_bytes prefers the recorded size."""
    models = CatalogModels(catalog)
    recorded = [(m, q, size) for m in catalog.models for q, size in m.sizes.items()]
    assert len(recorded) >= 4
    for m, quant, size in recorded:
        assert models.info(m, quant).tensor_bytes == pytest.approx(size, rel=0.06), (m.id, quant)
        assert estimated_file_bytes(catalog, m, quant) == size


def test_mixtures_of_experts_count_every_expert_and_read_only_the_used_ones(catalog):
    moe = [m for m in catalog.models if m.architecture.is_moe]
    assert {"qwen3-30b-a3b", "qwen3-coder-30b-a3b-instruct", "gpt-oss-20b"} <= {m.id for m in moe}
    for m in moe:
        a = m.architecture
        assert 1 <= a.n_expert_used < a.n_expert and a.n_ff_exp > 0, m.id
        assert a.active_params < a.params / 4, m.id
    # OpenAI publishes gpt-oss-20b's active count as 3.61B of 20.91B, counting the output matrix and not the
    # input embeddings, as estimated_active_params does: a check of n_expert_used and n_ff_exp
    gpt = catalog.model("gpt-oss-20b").architecture
    assert gpt.estimated_active_params() == pytest.approx(3.61e9, rel=0.01)
    info = CatalogModels(catalog).info(catalog.model("qwen3-30b-a3b"), "Q4_K_M")
    assert info._arch_int("expert_count") == 128 and info._arch_int("expert_used_count") == 8
    assert sum(1 for t in info.tensors if t.name.endswith("_exps.weight")) == 3 * 48
    # drafts are measured against the parameters a target token reads: the 1.7B model is too big for 30B-A3B
    drafts = {d.id for d in recommend_drafts(catalog, "qwen3-30b-a3b")}
    assert "qwen3-0.6b" in drafts and "qwen3-1.7b" not in drafts


def recommend_drafts(catalog, target_id):
    from engine.planning.advice.recommend import candidate_drafts

    return candidate_drafts(catalog, catalog.model(target_id))


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
            # the quant's name, or for a type named after its weights (MXFP4_MOE) the weight type's
            named = {quant.lower(), catalog.quant(quant).weight_type.lower()}
            assert any(n in filename.lower() for n in named), (m.id, quant, filename)
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
    from .repo_sources import pinned_llama_source

    source = pinned_llama_source("tools/quantize/quantize.cpp")
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


# -- the tokenizer ids against llama.cpp's own rule -----------------------------------------------------


def _padded(vocab: VocabInfo, n_vocab: int) -> VocabInfo:
    """The vocabulary as a model with n_vocab embedding rows carries it: convert_hf_to_gguf.py pads the
    tokenizer's tokens to the model's vocab_size with "[PAD<id>]" tokens."""
    assert n_vocab >= vocab.n_tokens, f"{n_vocab} rows cannot hold the {vocab.n_tokens}-token vocabulary"
    pads = tuple(f"[PAD{i}]".encode() for i in range(vocab.n_tokens, n_vocab))
    return VocabInfo(
        vocab.tokenizer_model,
        vocab.tokenizer_pre,
        vocab.vocab_type,
        n_vocab,
        vocab.bos_id,
        vocab.eos_id,
        vocab.add_bos,
        vocab.add_eos,
        None,
        vocab.load_error,
        vocab.tokens + pads,
    )


@pytest.fixture(scope="module")
def pinned_vocabs(catalog):
    """The pinned llama.cpp's vocabulary files the catalog names, read; skips where the sources are absent."""
    from .test_gguf_inspect import vocab_dir

    folder = vocab_dir()
    names = {n for t in catalog.tokenizers for n in (t.vocab_gguf, t.nearest_gguf) if n}
    missing = sorted(n for n in names if not (folder / n).is_file())
    assert not missing, f"named in tokenizers.json but not in {folder}: {missing}"
    return {n: inspect_gguf(folder / n).vocab for n in names}


def test_every_tokenizer_id_is_declared_and_says_whether_llama_cpp_ships_it(catalog):
    used = {m.tokenizer for m in catalog.models}
    declared = {t.id for t in catalog.tokenizers}
    assert used <= declared
    with_file = {t.id for t in catalog.tokenizers if t.vocab_gguf}
    # only these families have a vocabulary file of their own among the pinned llama.cpp's ggml-vocab-*.gguf
    assert with_file == {"phi-3", "gemma-4"}
    for t in catalog.tokenizers:
        assert t.vocab_gguf or t.notes, f"{t.id}: say why no vocabulary file stands for it"


def test_models_claimed_compatible_are_by_llama_cpps_rule(catalog, pinned_vocabs):
    """Where a pinned vocabulary file holds a tokenizer, every two catalog models of that id pass llama.cpp's
    rule on it, each with its own embedding rows (the size rule: within 128); where none does, the catalog's
    row counts still pass the size rule."""
    by_id: dict[str, list] = {}
    for m in catalog.models:
        by_id.setdefault(m.tokenizer, []).append(m)
    checked = 0
    for tokenizer_id, models in by_id.items():
        t = catalog.tokenizer(tokenizer_id)
        for a in models:
            for b in models:
                gap = abs(a.architecture.n_vocab - b.architecture.n_vocab)
                assert gap <= SPEC_VOCAB_MAX_SIZE_DIFFERENCE, (a.id, b.id, gap)
                if t.vocab_gguf and a.id < b.id:
                    vocab = pinned_vocabs[t.vocab_gguf]
                    assert vocab.load_error is None
                    verdict = vocab_compatibility(
                        _padded(vocab, a.architecture.n_vocab), _padded(vocab, b.architecture.n_vocab)
                    )
                    assert verdict == {"compatible": True, "reasons": []}, (a.id, b.id, verdict)
                    checked += 1
    assert checked >= 1  # Phi-3 medium with Phi-3.5 mini


def _as_catalog_states(catalog, tokenizer_id: str, pinned_vocabs) -> VocabInfo | None:
    """A tokenizer id's vocabulary as far as the pinned files show it: its own file, else the file of its
    lineage (nearest_gguf: the regular tokens it shares), padded to the rows its catalog models state."""
    t = catalog.tokenizer(tokenizer_id)
    name = t.vocab_gguf or t.nearest_gguf
    rows = {m.architecture.n_vocab for m in catalog.models if m.tokenizer == tokenizer_id}
    if name is None:
        return None
    vocab = pinned_vocabs[name]
    n_vocab = min(rows) if rows else vocab.n_tokens
    return _padded(vocab, n_vocab) if n_vocab >= vocab.n_tokens else None


def test_different_tokenizer_ids_are_refused_by_llama_cpps_rule(catalog, pinned_vocabs):
    """A tokenizer with a pinned vocabulary file of its own is refused, by llama.cpp's rule, against every
    other tokenizer id of the catalog that the pinned files show (its own file, or its lineage's padded to
    its models' rows). A lineage file that is the very file of the first id (Gemma 3 next to Gemma 4) shows
    nothing and is skipped: the ids differ in special tokens no pinned file holds."""
    refused = 0
    for a in (t for t in catalog.tokenizers if t.vocab_gguf):
        mine = _as_catalog_states(catalog, a.id, pinned_vocabs)
        for b in catalog.tokenizers:
            if b.id == a.id or a.vocab_gguf in (b.vocab_gguf, b.nearest_gguf):
                continue
            theirs = _as_catalog_states(catalog, b.id, pinned_vocabs)
            if theirs is None:
                continue
            verdict = vocab_compatibility(mine, theirs)
            assert not verdict["compatible"] and verdict["reasons"], (a.id, b.id)
            refused += 1
    assert refused >= 10


def test_phi_3_passes_llama_cpps_rule_against_llama_2(pinned_vocabs):
    """Found while writing the test above, and why it compares what the catalog's models state rather than
    bare files: Phi-3's 32064 tokens are Llama 2's 32000 with 64 added, within llama.cpp's tolerance of 128,
    so llama.cpp would let a Llama-2-vocabulary model and a Phi-3 model draft for each other. Mistral v3,
    which extends the same vocabulary to 32768 rows, is past it."""
    phi3, llama2 = pinned_vocabs["ggml-vocab-phi-3.gguf"], pinned_vocabs["ggml-vocab-llama-spm.gguf"]
    assert vocab_compatibility(phi3, llama2) == {"compatible": True, "reasons": []}
    assert not vocab_compatibility(phi3, _padded(llama2, 32768))["compatible"]


def test_a_nearest_file_is_not_the_tokenizer_it_stands_next_to(catalog, pinned_vocabs):
    """What the notes say, where llama.cpp's rule can show it: Mistral v3's 32768 rows are past the size
    tolerance of Llama 2's 32000-token file; Llama 3.1's models have Llama 3.0's 128256 rows, and only the
    token text tells them apart (ids from 128004 on, which the file names reserved tokens)."""
    mistral = catalog.model("mistral-7b-instruct-v0.3").architecture.n_vocab
    spm = pinned_vocabs[catalog.tokenizer("mistral-v3").nearest_gguf]
    assert mistral - spm.n_tokens > SPEC_VOCAB_MAX_SIZE_DIFFERENCE
    bpe = pinned_vocabs[catalog.tokenizer("llama-3.1").nearest_gguf]
    assert bpe.n_tokens == catalog.model("llama-3.1-8b-instruct").architecture.n_vocab
    assert bpe.token_text(128004) == b"<|reserved_special_token_2|>"  # <|finetune_right_pad_id|> in 3.1
    qwen = pinned_vocabs[catalog.tokenizer("qwen3").nearest_gguf]
    assert qwen.token_text(151646) == b"[PAD151646]"  # <|object_ref_start|> in Qwen2.5 and Qwen3


def test_the_bundled_pair_is_compatible_by_llama_cpps_rule_on_the_files(catalog):
    target, draft = catalog.model("spectune-demo-target"), catalog.model("spectune-demo-draft")
    assert target.tokenizer == draft.tokenizer
    for quant in ("F16", "Q8_0"):
        t, d = catalog.model_file(target.id, quant), catalog.model_file(draft.id, quant)
        assert check_pair(t.bundled_path, d.bundled_path) == {"compatible": True, "reasons": []}


# -- the MoE and tokenizer parts of the schema say what is wrong ------------------------------------------


def test_a_mixture_of_experts_needs_all_three_numbers(copy):
    edit(copy / "families" / "qwen3.json", lambda d: d["models"][-1]["arch"].pop("n_ff_exp"))
    expect(
        copy,
        r"'qwen3-coder-30b-a3b-instruct'\): arch: a mixture of experts needs 'n_expert', 'n_expert_used', "
        r"'n_ff_exp'; missing 'n_ff_exp'",
    )


def test_more_experts_used_than_there_are(copy):
    edit(copy / "families" / "gpt-oss.json", lambda d: d["models"][0]["arch"].update(n_expert_used=33))
    expect(copy, r"'gpt-oss-20b'\): arch: n_expert_used 33 is more than n_expert 32")


def test_a_wrong_expert_width_fails_the_parameter_count(copy):
    edit(copy / "families" / "gpt-oss.json", lambda d: d["models"][0]["arch"].update(n_ff_exp=1440))
    a = load_catalog(copy).model("gpt-oss-20b").architecture
    assert a.estimated_params() != pytest.approx(a.params, rel=0.015)


def test_a_tokenizer_the_catalog_does_not_declare(copy):
    edit(copy / "tokenizers.json", lambda d: d.update(tokenizers=[t for t in d["tokenizers"] if t["id"] != "phi-4"]))
    expect(copy, r"phi\.json: model 'phi-4' uses the tokenizer 'phi-4', which .*tokenizers\.json does not declare")


def test_a_vocabulary_file_must_be_a_pinned_vocab_name_with_its_source(copy):
    def rename(d):
        d["tokenizers"][0]["vocab_gguf"] = "qwen2.gguf"

    edit(copy / "tokenizers.json", rename)
    expect(copy, r"tokenizer 'qwen2.5': 'vocab_gguf' must be a file name ggml-vocab-<name>\.gguf")
    shutil.copy(CATALOG_DIR / "tokenizers.json", copy / "tokenizers.json")
    edit(copy / "tokenizers.json", lambda d: d["tokenizers"][0].update(vocab_gguf="ggml-vocab-qwen2.gguf"))
    expect(copy, r"tokenizer 'qwen2.5': 'vocab_source' must say which model ggml-vocab-qwen2\.gguf was made from")


def test_tokenizers_that_differ_in_their_special_tokens_are_kept_apart(catalog):
    """DeepSeek-R1-0528-Qwen3-8B has Qwen3-8B's shape but DeepSeek's special tokens, so no Qwen3 model drafts
    for it; Ministral 3's Tekken names [THINK]/[/THINK] where Small 3.x has placeholders, so it drafts only for
    its own release. Neither has a pinned vocabulary file: these rest on the models' tokenizer files."""
    r1 = catalog.model("deepseek-r1-0528-qwen3-8b")
    assert r1.tokenizer != catalog.model("qwen3-8b").tokenizer
    assert r1.architecture.estimated_params() == pytest.approx(
        catalog.model("qwen3-8b").architecture.estimated_params()
    )
    assert not [p for p in catalog.pairings if r1.id in (p.target, p.draft)]
    ministral = {m.id for m in catalog.models if m.tokenizer == "mistral-tekken-2512"}
    assert len(ministral) == 3
    for p in catalog.pairings:
        assert (p.target in ministral) == (p.draft in ministral), (p.target, p.draft)


# -- Gemma 4: per-layer shapes ------------------------------------------------------------------------


def test_gemma_4_26b_a4b_numbers_are_the_pinned_headers(catalog):
    """The pinned llama.cpp's ggml-vocab-gemma-4.gguf is a 26B-A4B's header: the catalog entry's numbers and
    its 'gemma4' object say what that header says, layer by layer."""
    from engine.planning.advice.model_numbers import model_info_from_architecture

    from .test_gguf_inspect import vocab_dir

    path = vocab_dir() / "ggml-vocab-gemma-4.gguf"
    header = inspect_gguf(path)
    a = catalog.model("gemma-4-26b-a4b-it").architecture
    numbers = model_info_from_architecture(a)
    for key, value in numbers.metadata.items():
        if key.startswith("gemma4."):
            assert header.metadata[key] == value, key
    assert header.vocab.n_tokens == a.n_vocab


def test_gemma_4_counts_its_layers_and_reads_fewer_than_it_stores(catalog):
    """Google's counts: 25.2B total and 3.8B active for the 26B-A4B, 30.7B for the 31B (rounded, within
    0.2%), 2.3B effective for E2B (its per-layer tables are looked up, not read)."""
    moe, dense, e2b = (
        catalog.model(m).architecture for m in ("gemma-4-26b-a4b-it", "gemma-4-31b-it", "gemma-4-e2b-it")
    )
    assert moe.estimated_params() == pytest.approx(25.2e9, rel=0.002)
    assert moe.estimated_active_params() == pytest.approx(3.8e9, rel=0.01)
    assert dense.estimated_params() == pytest.approx(30.7e9, rel=0.002)
    assert e2b.active_params == pytest.approx(2.3e9, rel=0.02) and e2b.params > 4.6e9
    assert "gemma-4-e2b-it" in {m.id for m in catalog.drafts_for("gemma-4-31b-it")}


def _gemma4(model: int, **changes):
    def change(doc):
        doc["models"][model]["arch"]["gemma4"].update(changes)
        for key in [k for k, v in changes.items() if v is None]:
            doc["models"][model]["arch"]["gemma4"].pop(key)

    return change


@pytest.mark.parametrize(
    "model, changes, message",
    [
        (3, {"head_dim_global": None}, r"'gemma-4-31b-it'\): arch: gemma4: missing 'head_dim_global'"),
        (3, {"head_dim_global": 0}, r"arch: gemma4: 'head_dim_global' must be positive, found 0"),
        (3, {"k_eq_v": 1}, r"arch: gemma4: 'k_eq_v' must be bool, found 1"),
        (
            3,
            {"global_every": 7},
            r"arch: gemma4: the last of 60 layers must be global; global_every 7 makes it sliding",
        ),
        (3, {"n_head_kv_global": 5}, r"arch: gemma4: n_head 32 is not a multiple of n_head_kv_global 5"),
        (0, {"shared_kv_layers": 33}, r"'gemma-4-e2b-it'\): arch: gemma4: shared_kv_layers 33 leaves fewer than"),
        (1, {"double_wide_ffn": True, "shared_kv_layers": None}, r"double_wide_ffn widens .* needs shared_kv_layers"),
        (3, {"global_heads": 4}, r"arch: gemma4: unknown key 'global_heads'"),
    ],
)
def test_a_bad_gemma4_layout_says_what_is_wrong(copy, model, changes, message):
    edit(copy / "families" / "gemma-4.json", _gemma4(model, **changes))
    expect(copy, message)


def test_the_gemma4_object_belongs_to_gemma4_alone(copy):
    edit(copy / "families" / "gemma-4.json", lambda d: d["models"][3]["arch"].pop("gemma4"))
    expect(copy, r"'gemma-4-31b-it'\): arch: 'gemma4' \(the per-layer shapes\) is needed for, and only for, gemma4")
    shutil.copy(CATALOG_DIR / "families" / "gemma-4.json", copy / "families" / "gemma-4.json")
    edit(copy / "families" / "gemma-4.json", lambda d: d["models"][3]["arch"].pop("sliding_window"))
    expect(copy, r"'gemma-4-31b-it'\): arch: a gemma4 model needs its 'sliding_window'")

    def onto_gemma3(d):
        d["models"][-1]["arch"]["gemma4"] = {"global_every": 2, "head_dim_global": 256, "n_head_kv_global": 8}

    edit(copy / "families" / "gemma-3.json", onto_gemma3)
    expect(copy, r"arch: 'gemma4' \(the per-layer shapes\) is needed for, and only for, gemma4; this model is gemma3")
