"""engine.models.compat: llama.cpp's draft/target rule, on real vocabularies and against llama.cpp itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.core.settings import LoadSettings
from engine.models.compat import SPEC_VOCAB_MAX_SIZE_DIFFERENCE, check_pair, vocab_compatibility
from engine.models.gguf_inspect import inspect_gguf
from engine.models.synthetic import PairSpec, build_vocab, write_pair
from engine.runtime.binding import Engine, SpecrtError

from .test_gguf_inspect import tokenizer_fields, vocab_dir, vocab_files, write_model


@pytest.fixture(scope="module")
def vocabs():
    return {p.name.removeprefix("ggml-vocab-").removesuffix(".gguf"): inspect_gguf(p).vocab for p in vocab_files()}


def llama_cpp_accepts(target: Path, draft: Path) -> bool:
    """What the pinned llama.cpp decides: specrt runs common_speculative_init on the loaded pair."""
    try:
        with Engine(LoadSettings(target, draft, ctx=256)):
            return True
    except SpecrtError as exc:
        if exc.kind == "incompatible":
            return False
        raise


def test_every_vocab_file_is_compatible_with_itself(vocabs):
    assert len(vocabs) == 19
    for name, vocab in vocabs.items():
        assert vocab_compatibility(vocab, vocab) == {"compatible": True, "reasons": []}, name


@pytest.mark.parametrize(
    "target, draft, expected",
    [
        # rule 1 fails first, and everything after it fails too
        (
            "llama-spm",
            "bert-bge",
            [
                "vocab type differs: target SPM (llama), draft WPM (bert)",
                "BOS token id differs: target 1, draft 101",
                "vocab sizes differ by 1478",
                "token text differs",
            ],
        ),
        # same type and flags, different BOS id and sizes
        (
            "deepseek-coder",
            "deepseek-llm",
            ["BOS token id differs: target 32013, draft 100000", "vocab sizes differ by 70144", "token text differs"],
        ),
        # add-BOS on against off
        (
            "llama-bpe",
            "gpt-2",
            ["add-BOS differs: target on, draft off", "vocab sizes differ by 77999", "token text differs"],
        ),
        # add-EOS differs (T5-style vocabularies add EOS)
        (
            "nomic-bert-moe",
            "llama-spm",
            [
                "vocab type differs",
                "BOS token id differs: target 0, draft 1",
                "add-EOS differs: target on, draft off",
                "vocab sizes differ",
                "token text differs",
            ],
        ),
        # sizes within 128 but different text
        ("starcoder", "refact", ["token text differs"]),
    ],
)
def test_different_families_fail_with_the_right_reasons(vocabs, target, draft, expected):
    verdict = vocab_compatibility(vocabs[target], vocabs[draft])
    assert verdict["compatible"] is False
    assert len(verdict["reasons"]) == len(expected), verdict["reasons"]
    for reason, start in zip(verdict["reasons"], expected):
        assert reason.startswith(start), (reason, start)


@pytest.mark.parametrize("target, draft", [("llama-spm", "phi-3"), ("qwen2", "qwen35"), ("gpt-neox", "mpt")])
def test_related_vocabularies_that_llama_cpp_accepts(vocabs, target, draft):
    # Phi-3 extends the Llama 2 vocabulary by 64 tokens (within 128); Qwen3.5 and Qwen2 differ only in the
    # pre-tokenizer, which the rule does not compare; MPT uses the GPT-NeoX tokenizer
    assert vocab_compatibility(vocabs[target], vocabs[draft]) == {"compatible": True, "reasons": []}
    assert vocab_compatibility(vocabs[draft], vocabs[target])["compatible"] is True


def test_verdicts_are_symmetric_over_a_sample_of_pairs(vocabs):
    names = ["llama-spm", "phi-3", "baichuan", "deepseek-coder", "gpt-2", "gpt-neox", "mpt", "falcon"]
    for a in names:
        for b in names:
            assert (
                vocab_compatibility(vocabs[a], vocabs[b])["compatible"]
                == vocab_compatibility(vocabs[b], vocabs[a])["compatible"]
            ), (a, b)


def test_a_vocab_only_file_pair_by_path():
    models = vocab_dir()
    verdict = check_pair(models / "ggml-vocab-llama-spm.gguf", models / "ggml-vocab-baichuan.gguf")
    assert verdict["compatible"] is False
    assert verdict["reasons"][0] == (
        "vocab sizes differ by 32000 (target 32000, draft 64000); "
        f"llama.cpp allows at most {SPEC_VOCAB_MAX_SIZE_DIFFERENCE}"
    )


# -- agreement with llama.cpp --------------------------------------------------------------------


def test_synthetic_pairs_agree_with_llama_cpp(tmp_path):
    good_t, good_d = write_pair(tmp_path / "good", PairSpec())
    bad_t, bad_d = write_pair(tmp_path / "bad", PairSpec(), draft_vocab_variant=1)
    good, bad = check_pair(good_t, good_d), check_pair(bad_t, bad_d)
    assert good == {"compatible": True, "reasons": []}
    assert bad["compatible"] is False and len(bad["reasons"]) == 1
    assert bad["reasons"][0].startswith("token text differs for 2 of the ids from 5 upward")
    assert llama_cpp_accepts(good_t, good_d) is True
    assert llama_cpp_accepts(bad_t, bad_d) is False


SYNTHETIC_VOCAB = build_vocab()[0]


@pytest.mark.parametrize(
    "draft_changes, compatible, reason",
    [
        (dict(add_bos=False), False, "add-BOS differs: target on, draft off"),
        (dict(bos=3), False, "BOS token id differs: target 1, draft 3"),
        # llama.cpp compares EOS ids only when EOS is added: a different EOS id alone is accepted
        (dict(eos=3), True, None),
        (dict(extra_tokens=SPEC_VOCAB_MAX_SIZE_DIFFERENCE), True, None),
        (dict(extra_tokens=SPEC_VOCAB_MAX_SIZE_DIFFERENCE + 1), False, "vocab sizes differ by 129"),
        # token ids below 5 are not compared
        (dict(tokens=["<unk>", "<s>", "</s>", "<0x00>", "<pad>"] + SYNTHETIC_VOCAB[5:]), True, None),
        (
            dict(tokens=SYNTHETIC_VOCAB[:5] + ["<changed>"] + SYNTHETIC_VOCAB[6:]),
            False,
            "token text differs for 1 of the ids from 5 upward: 5 (target '<0x02>', draft '<changed>')",
        ),
    ],
)
def test_hand_built_drafts_agree_with_llama_cpp(tmp_path, draft_changes, compatible, reason):
    shape = dict(n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=128, dtype="f32")
    target = write_model(tmp_path / "target.gguf", **shape)
    draft = write_model(tmp_path / "draft.gguf", **shape, **draft_changes)
    verdict = check_pair(target, draft)
    assert verdict["compatible"] is compatible, verdict
    if reason:
        assert len(verdict["reasons"]) == 1 and verdict["reasons"][0].startswith(reason), verdict["reasons"]
    assert llama_cpp_accepts(target, draft) is compatible


@pytest.fixture(scope="module")
def real_vocab_models(tmp_path_factory):
    """Tiny llama models that carry real tokenizers, so llama.cpp loads them and applies its rule."""
    out = tmp_path_factory.mktemp("real_vocab_models")
    cache: dict[str, Path] = {}

    def model(name: str) -> Path:
        if name not in cache:
            fields = tokenizer_fields(vocab_dir() / f"ggml-vocab-{name}.gguf")
            cache[name] = write_model(
                out / f"{name}.gguf", n_embd=32, n_layer=1, n_head=2, n_head_kv=1, n_ff=32, tokenizer=fields, tie=True
            )
        return cache[name]

    return model


# the gguf package needs seconds per large vocabulary to copy its tokenizer, so the pairs are the smaller ones:
# compatible SPM, compatible BPE, BPE of equal size and different text, SPM of different sizes
@pytest.mark.slow
@pytest.mark.parametrize(
    "target, draft", [("llama-spm", "phi-3"), ("gpt-neox", "mpt"), ("starcoder", "refact"), ("llama-spm", "baichuan")]
)
def test_real_vocabularies_agree_with_llama_cpp(real_vocab_models, vocabs, target, draft):
    paths = {name: real_vocab_models(name) for name in (target, draft)}
    ours = check_pair(paths[target], paths[draft])
    assert ours["compatible"] == vocab_compatibility(vocabs[target], vocabs[draft])["compatible"]
    assert llama_cpp_accepts(paths[target], paths[draft]) is ours["compatible"]
