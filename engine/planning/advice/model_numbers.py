"""A model from its numbers, without a file: the tensors and GGUF keys llama.cpp's loader would find, so
that a catalog entry (engine.models.catalog) is planned (engine.planning.memory.memory_plan) and its speed
predicted (engine.planning.speed.speed_model) before anything is downloaded, and so that tests can build a
model of any shape in memory."""

from __future__ import annotations

from typing import Any

from engine.models.gguf_inspect import GGML_TYPE_IDS, GGML_TYPES, ModelInfo, TensorInfo, VocabInfo, ggml_row_bytes
from engine.models.tensor_layout import ArchitectureNumbers, tensor_layout
from engine.planning.memory.memory_plan import CPU_ALIGNMENT, PlanError, align

# src/llama-quant.cpp, tensor_type_fallback: the type a row that a 256-block type cannot hold gets instead
_QUANT_FALLBACK = {
    **dict.fromkeys(("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS"), "IQ4_NL"),
    **dict.fromkeys(("Q2_K", "Q3_K", "TQ1_0", "TQ2_0"), "Q4_0"),
    "Q4_K": "Q5_0",
    "Q5_K": "Q5_1",
    "Q6_K": "Q8_0",
}


def _block(type_name: str) -> int:
    return GGML_TYPES[GGML_TYPE_IDS[type_name]][1]


def model_info_from_numbers(
    *, weight_type: str = "F16", bits_per_weight: float | None = None, name: str = "", **numbers: Any
) -> ModelInfo:
    """A ModelInfo with the tensors of the architecture these numbers describe, so a model can be planned
    before it is downloaded. The tensors are engine.models.tensor_layout's (ArchitectureNumbers says what each
    number is); this lays them out as a GGUF file would and writes the keys the converter writes.

    Weight matrices take weight_type; their bytes are n_elements x bits_per_weight / 8 when bits_per_weight is
    given (a quant mix's average, e.g. 4.9 for Q4_K_M) and ggml's exact size otherwise. A matrix whose rows
    are not a whole number of weight_type blocks takes llama-quantize's fallback type instead, at that type's
    exact size (src/llama-quant.cpp, tensor_type_fallback: Q4_K -> Q5_0, Q6_K -> Q8_0, ...; F16 when even the
    fallback does not divide the row). Norms and routers are F32. plan_memory treats the result like a file's
    header; only the CPU mapping span has no file behind it. A gemma4 model's keys are those the converter
    writes and engine.planning.memory.kv_layers reads (per-layer KV heads, key_length / key_length_swa, the window
    pattern)."""
    return model_info_from_architecture(ArchitectureNumbers(**numbers), weight_type, bits_per_weight, name)


def model_info_from_architecture(
    numbers: ArchitectureNumbers, weight_type: str = "F16", bits_per_weight: float | None = None, name: str = ""
) -> ModelInfo:
    """model_info_from_numbers for numbers already gathered (a catalog entry's Architecture is one)."""
    _check(numbers)
    weight_type = _checked_weight_type(weight_type, bits_per_weight)
    file = _TensorFile(weight_type, bits_per_weight)
    for tensor in tensor_layout(numbers):
        file.add(tensor.name, tensor.shape, tensor.matrix)
    return ModelInfo(
        path=f"<{name or numbers.architecture} from numbers>",
        file_size=file.offset,
        version=3,
        alignment=CPU_ALIGNMENT,
        data_offset=0,
        metadata=_metadata(numbers, name),
        tensors=file.tensors,
        vocab=VocabInfo(None, None, "BPE", numbers.n_vocab, -1, -1, False, False, None, None),
    )


def _check(n: ArchitectureNumbers) -> None:
    """The PlanError that says which of the numbers cannot make a model, if any does."""
    if n.n_expert and not (1 <= n.n_expert_used <= n.n_expert and n.n_ff_exp > 0):
        raise PlanError("an MoE model needs 1 <= n_expert_used <= n_expert and n_ff_exp > 0")
    required = ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab", "n_ctx_train")
    bad = [k for k in required if not isinstance(getattr(n, k), int) or getattr(n, k) <= 0]
    if bad:
        raise PlanError(f"model numbers must be positive integers: {', '.join(bad)}")
    ssm = (n.ssm_conv_kernel, n.ssm_state_size, n.ssm_group_count, n.ssm_time_step_rank, n.ssm_inner_size)
    if n.hybrid and not all(v > 0 for v in ssm):
        raise PlanError(f"a {n.architecture} model needs its ssm sizes (conv kernel, state, groups, rank, inner)")
    if n.gemma4 and not (n.head_dim_global > 0 and n.n_head_kv_global > 0 and n.sliding_window):
        raise PlanError("a gemma4 model needs head_dim_global, n_head_kv_global and sliding_window")


def _checked_weight_type(weight_type: str, bits_per_weight: float | None) -> str:
    """The weight type upper-cased, or the PlanError that says why the file's numbers cannot be."""
    weight_type = weight_type.upper()
    if weight_type not in GGML_TYPE_IDS:
        raise PlanError(f"unknown ggml type {weight_type!r}")
    if bits_per_weight is not None and not 0 < bits_per_weight <= 32:
        raise PlanError(f"bits per weight must be in (0, 32], got {bits_per_weight}")
    return weight_type


class _TensorFile:
    """The tensors written so far and where the next one starts, each laid out as a GGUF file aligns them."""

    def __init__(self, weight_type: str, bits_per_weight: float | None) -> None:
        self.weight_type = weight_type
        self.bits_per_weight = bits_per_weight
        self.tensors: list[TensorInfo] = []
        self.offset = 0

    def add(self, tensor_name: str, shape: tuple[int, ...], matrix: bool = True) -> None:
        type_name = self.weight_type if matrix else "F32"
        fallback = matrix and shape[0] % _block(type_name) != 0
        if fallback:
            type_name = _QUANT_FALLBACK.get(type_name, type_name)
            if shape[0] % _block(type_name):
                type_name = "F16"
        n_elements = 1
        for d in shape:
            n_elements *= d
        if matrix and self.bits_per_weight is not None and not fallback:
            n_bytes = int(-(-n_elements * self.bits_per_weight // 8))
        else:
            n_bytes = ggml_row_bytes(type_name, shape[0]) * (n_elements // shape[0])
        self.tensors.append(
            TensorInfo(tensor_name, shape, type_name, GGML_TYPE_IDS[type_name], self.offset, n_elements, n_bytes)
        )
        self.offset += align(n_bytes, CPU_ALIGNMENT)


def _metadata(n: ArchitectureNumbers, name: str) -> dict[str, Any]:
    """The GGUF keys the converter writes for these numbers, and that llama.cpp's loader reads back."""
    arch = n.architecture
    metadata: dict[str, Any] = {
        "general.architecture": arch,
        "general.name": name,
        f"{arch}.block_count": n.n_layer + n.nextn_layers,
        f"{arch}.embedding_length": n.n_embd,
        f"{arch}.attention.head_count": n.n_head,
        f"{arch}.attention.head_count_kv": n.n_head_kv,
        f"{arch}.attention.key_length": n.head_dim,
        f"{arch}.attention.value_length": n.head_dim,
        f"{arch}.feed_forward_length": n.n_ff,
        f"{arch}.context_length": n.n_ctx_train,
    }
    if n.sliding_window:
        metadata[f"{arch}.attention.sliding_window"] = n.sliding_window
    if n.nextn_layers:
        metadata[f"{arch}.nextn_predict_layers"] = n.nextn_layers
    if n.hybrid:
        metadata[f"{arch}.full_attention_interval"] = n.interval
        metadata[f"{arch}.ssm.conv_kernel"] = n.ssm_conv_kernel
        metadata[f"{arch}.ssm.state_size"] = n.ssm_state_size
        metadata[f"{arch}.ssm.group_count"] = n.ssm_group_count
        metadata[f"{arch}.ssm.time_step_rank"] = n.ssm_time_step_rank
        metadata[f"{arch}.ssm.inner_size"] = n.ssm_inner_size
    if n.n_ff_shared:
        metadata[f"{arch}.expert_shared_feed_forward_length"] = n.n_ff_shared
    if n.n_expert:
        metadata[f"{arch}.expert_count"] = n.n_expert
        metadata[f"{arch}.expert_used_count"] = n.n_expert_used
        metadata[f"{arch}.expert_feed_forward_length"] = n.n_ff_exp
    if n.gemma4:
        _add_gemma4_metadata(metadata, n)
    return metadata


def _add_gemma4_metadata(metadata: dict[str, Any], n: ArchitectureNumbers) -> None:
    """A gemma4's per-layer keys over the llama-style ones: KV heads and the window pattern a layer each."""
    arch, n_layer = n.architecture, n.n_layer
    pattern = [not n.is_global(il) for il in range(n_layer)]
    first_shared = n_layer - n.shared_kv_layers
    metadata.update(
        {
            f"{arch}.attention.head_count_kv": [n.n_head_kv if s else n.n_head_kv_global for s in pattern],
            f"{arch}.attention.key_length": n.head_dim_global,
            f"{arch}.attention.value_length": n.head_dim_global,
            f"{arch}.attention.key_length_swa": n.head_dim,
            f"{arch}.attention.value_length_swa": n.head_dim,
            f"{arch}.attention.sliding_window_pattern": pattern,
            f"{arch}.attention.shared_kv_layers": n.shared_kv_layers,
            f"{arch}.embedding_length_per_layer_input": n.n_embd_per_layer,
        }
    )
    if n.double_wide_ffn:  # llama.cpp reads feed_forward_length as a scalar or one entry per layer
        metadata[f"{arch}.feed_forward_length"] = [n.n_ff * (2 if il >= first_shared else 1) for il in range(n_layer)]
