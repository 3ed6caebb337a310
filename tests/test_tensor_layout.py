"""One description per architecture (engine.models.tensor_layout): the models the project writes hold exactly
the tensors it lists, the catalog's parameter counts are its counts, and a planned model is laid out from it."""

from __future__ import annotations

import pytest

from engine.models.catalog import load_catalog
from engine.models.gguf_inspect import inspect_gguf
from engine.models.synthetic import ModelShape, PairSpec, write_pair
from engine.models.tensor_layout import ArchitectureNumbers, parameter_count, tensor_layout
from engine.planning.advice.model_numbers import model_info_from_architecture

SHAPES = {
    "llama": PairSpec(),
    "gemma3": PairSpec(shape=ModelShape(sliding_window=64)),
    "qwen3moe": PairSpec(shape=ModelShape(n_expert=4, n_expert_used=2, n_ff_exp=64)),
    "qwen35": PairSpec(shape=ModelShape(hybrid=True, n_layer=8), draft_layers=4, mtp=True),
    "qwen35moe": PairSpec(shape=ModelShape(hybrid=True, n_layer=8, n_expert=4, n_expert_used=2), draft_layers=4),
    "gemma4": PairSpec(
        shape=ModelShape(gemma4=True, sliding_window=64, n_layer=12, shared_kv_layers=6), draft_layers=6
    ),
}


@pytest.mark.parametrize("arch", SHAPES)
def test_a_written_model_holds_the_tensors_its_architecture_lists(tmp_path, arch):
    spec = SHAPES[arch]
    target, draft = write_pair(tmp_path, spec)
    for path, n_layer, mtp in ((target, spec.shape.n_layer, spec.mtp), (draft, spec.draft_layers, False)):
        info = inspect_gguf(path)
        assert info.architecture == arch
        numbers = spec.shape.numbers(n_layer, info.vocab.n_tokens, mtp=mtp)
        listed = {t.name: t.shape for t in tensor_layout(numbers)}
        written = {t.name: t.shape for t in info.tensors}
        assert written == listed, (set(written) ^ set(listed), [k for k in written if listed.get(k) != written[k]])
        # the count of the trunk's matrices: all of the file's tensors of two or more dimensions but the MTP block's
        trunk = [t for t in info.tensors if len(t.shape) >= 2 and not t.name.startswith(f"blk.{n_layer}.")]
        assert parameter_count(numbers) == sum(t.n_elements for t in trunk)


def test_a_token_passes_through_the_used_experts_and_the_output_but_not_the_embeddings_table():
    numbers = ArchitectureNumbers(
        architecture="qwen3moe",
        n_layer=2,
        n_embd=64,
        n_head=4,
        n_head_kv=2,
        head_dim=16,
        n_ff=128,
        n_vocab=1000,
        n_ctx_train=512,
        n_expert=8,
        n_expert_used=2,
        n_ff_exp=32,
    )
    experts = 2 * 3 * 64 * 32 * 8  # two layers of gate, up and down for every expert
    assert parameter_count(numbers, per_token=True) == parameter_count(numbers) - experts * 6 // 8 - 1000 * 64
    tied = ArchitectureNumbers(**{**vars(numbers), "tied_embeddings": True})
    # tied: one table fewer in the file, but a token still multiplies by it as the output layer
    assert parameter_count(tied) == parameter_count(numbers) - 1000 * 64
    assert parameter_count(tied, per_token=True) == parameter_count(numbers, per_token=True)


def test_the_catalogs_models_are_planned_and_counted_from_the_same_tensors():
    catalog = load_catalog()
    for model in catalog.models:
        numbers = model.architecture
        info = model_info_from_architecture(numbers, "F16")
        assert [(t.name, t.shape) for t in info.tensors] == [(t.name, t.shape) for t in tensor_layout(numbers)]
        matrices = [t for t in info.tensors if len(t.shape) >= 2 and not _mtp(t.name, numbers)]
        assert model.architecture.estimated_params() == sum(t.n_elements for t in matrices), model.id


def _mtp(name: str, n: ArchitectureNumbers) -> bool:
    return name.startswith("blk.") and int(name.split(".")[1]) >= n.n_layer
