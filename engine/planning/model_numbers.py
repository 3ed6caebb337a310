"""A model from its numbers, without a file: the tensors and GGUF keys llama.cpp's loader would find, so
that a catalog entry (engine.models.catalog) is planned (engine.planning.memory_plan) and its speed
predicted (engine.planning.speed_model) before anything is downloaded, and so that tests can build a
model of any shape in memory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from engine.models.gguf_inspect import GGML_TYPE_IDS, GGML_TYPES, ModelInfo, TensorInfo, VocabInfo, ggml_row_bytes
from engine.planning.memory_plan import CPU_ALIGNMENT, PlanError, align
from engine.planning.recurrent import DEFAULT_FULL_ATTENTION_INTERVAL, HYBRID_ARCHITECTURES

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
    *,
    architecture: str,
    n_layer: int,
    n_embd: int,
    n_head: int,
    n_head_kv: int,
    head_dim: int,
    n_ff: int,
    n_vocab: int,
    n_ctx_train: int,
    tied_embeddings: bool = False,
    weight_type: str = "F16",
    bits_per_weight: float | None = None,
    name: str = "",
    n_expert: int = 0,
    n_expert_used: int = 0,
    n_ff_exp: int = 0,
    sliding_window: int | None = None,
    n_ff_shared: int = 0,
    full_attention_interval: int = 0,
    ssm_conv_kernel: int = 0,
    ssm_state_size: int = 0,
    ssm_group_count: int = 0,
    ssm_time_step_rank: int = 0,
    ssm_inner_size: int = 0,
    nextn_layers: int = 0,
    global_every: int = 0,
    head_dim_global: int = 0,
    n_head_kv_global: int = 0,
    shared_kv_layers: int = 0,
    n_embd_per_layer: int = 0,
    k_eq_v: bool = False,
    double_wide_ffn: bool = False,
) -> ModelInfo:
    """A ModelInfo with the tensors of a llama-style decoder, so a model can be planned before it is downloaded.

    The tensor list is what llama.cpp's converter writes for llama / qwen2 / qwen3 /
    gemma / mistral / phi3-style decoders: token_embd, per layer attn_q/k/v/output and
    ffn_gate/up/down with their norms, output_norm and (unless tied) output. Weight
    matrices take weight_type; their bytes are n_elements x bits_per_weight / 8 when
    bits_per_weight is given (a quant mix's average, e.g. 4.9 for Q4_K_M) and ggml's
    exact size otherwise. A matrix whose rows are not a whole number of weight_type
    blocks takes llama-quantize's fallback type instead, at that type's exact size
    (src/llama-quant.cpp, tensor_type_fallback: Q4_K -> Q5_0, Q6_K -> Q8_0, ...; F16
    when even the fallback does not divide the row).
    Norms are F32. Biases, per-layer extras and vision towers are left out (well under
    1% of the bytes of the models this is used for). plan_memory treats the result
    like a file's header; only the CPU mapping span has no file behind it.
    n_expert > 0 makes every layer's FFN a routed one (qwen3moe's layout): a router kept in F32 and
    the experts' gate, up and down stacked in one tensor each, n_ff_exp rows per expert.
    sliding_window: the attention window (tokens) of the layers the architecture's rule makes slide
    (engine.planning.sliding_window), written as the GGUF's attention.sliding_window.
    n_ff_shared > 0 adds a shared expert of that many rows beside the routed ones (qwen35moe, qwen2moe).
    A hybrid architecture (engine.planning.recurrent: qwen35, qwen35moe, qwen3next) takes its layout from
    full_attention_interval (llama.cpp's default 4) and the delta-net sizes ssm_* (the GGUF's ssm.* keys):
    its recurrent layers hold Qwen3.5's delta-net tensors (attn_qkv, attn_gate, ssm_conv1d, ssm_out, ...)
    in place of attention, and its attention layers a query twice as wide (the output gate) with per-head
    q/k norms, as src/models/qwen35.cpp creates them. nextn_layers MTP blocks (a full-attention layer with
    eh_proj and its norms) follow the trunk and count in block_count, as the converter writes them.
    A gemma4 model (engine.models.catalog.Gemma4Layers) takes its per-layer shapes from the rest: every
    global_every-th layer global, with heads of head_dim_global and n_head_kv_global KV heads (head_dim and
    n_head_kv are the sliding layers'), the last shared_kv_layers without K and V, per-layer embeddings of
    n_embd_per_layer, no V on global layers with k_eq_v, and the shared layers' FFN twice as wide with
    double_wide_ffn; its tensors are those src/models/gemma4.cpp creates, its keys those the converter writes
    and engine.planning.kv_layers reads (per-layer KV heads, key_length / key_length_swa, the window pattern).
    """
    numbers = _checked(_Numbers(**locals()))  # locals() here are the parameters and nothing else
    file = _TensorFile(numbers.weight_type, numbers.bits_per_weight)
    _add_tensors(file, numbers)
    return ModelInfo(
        path=f"<{name or architecture} from numbers>",
        file_size=file.offset,
        version=3,
        alignment=CPU_ALIGNMENT,
        data_offset=0,
        metadata=_metadata(numbers),
        tensors=file.tensors,
        vocab=VocabInfo(None, None, "BPE", n_vocab, -1, -1, False, False, None, None),
    )


@dataclass(frozen=True)
class _Numbers:
    """model_info_from_numbers's parameters as one value, for the steps that build the tensors and the keys."""

    architecture: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    tied_embeddings: bool
    weight_type: str
    bits_per_weight: float | None
    name: str
    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    sliding_window: int | None
    n_ff_shared: int
    full_attention_interval: int
    ssm_conv_kernel: int
    ssm_state_size: int
    ssm_group_count: int
    ssm_time_step_rank: int
    ssm_inner_size: int
    nextn_layers: int
    global_every: int
    head_dim_global: int
    n_head_kv_global: int
    shared_kv_layers: int
    n_embd_per_layer: int
    k_eq_v: bool
    double_wide_ffn: bool

    @property
    def hybrid(self) -> bool:
        return self.architecture in HYBRID_ARCHITECTURES

    @property
    def gemma4(self) -> bool:
        # without global_every a gemma4 is planned llama-style, one shape for all layers (tests edit its keys)
        return self.architecture == "gemma4" and self.global_every > 0

    @property
    def interval(self) -> int:
        return self.full_attention_interval or DEFAULT_FULL_ATTENTION_INTERVAL


def _checked(n: _Numbers) -> _Numbers:
    """The numbers with weight_type upper-cased, or the PlanError that says which of them cannot make a model."""
    if n.n_expert and not (1 <= n.n_expert_used <= n.n_expert and n.n_ff_exp > 0):
        raise PlanError("an MoE model needs 1 <= n_expert_used <= n_expert and n_ff_exp > 0")
    required = ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab", "n_ctx_train")
    bad = [k for k in required if not isinstance(getattr(n, k), int) or getattr(n, k) <= 0]
    if bad:
        raise PlanError(f"model numbers must be positive integers: {', '.join(bad)}")
    n = replace(n, weight_type=n.weight_type.upper())
    if n.weight_type not in GGML_TYPE_IDS:
        raise PlanError(f"unknown ggml type {n.weight_type!r}")
    if n.bits_per_weight is not None and not 0 < n.bits_per_weight <= 32:
        raise PlanError(f"bits per weight must be in (0, 32], got {n.bits_per_weight}")
    ssm = (n.ssm_conv_kernel, n.ssm_state_size, n.ssm_group_count, n.ssm_time_step_rank, n.ssm_inner_size)
    if n.hybrid and not all(v > 0 for v in ssm):
        raise PlanError(f"a {n.architecture} model needs its ssm sizes (conv kernel, state, groups, rank, inner)")
    if n.gemma4 and not (n.head_dim_global > 0 and n.n_head_kv_global > 0 and n.sliding_window):
        raise PlanError("a gemma4 model needs head_dim_global, n_head_kv_global and sliding_window")
    return n


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


def _add_tensors(file: _TensorFile, n: _Numbers) -> None:
    """Every tensor of the model, in the converter's order: token_embd, the layers, output_norm, output."""
    file.add("token_embd.weight", (n.n_embd, n.n_vocab))
    if n.gemma4:
        _gemma4_tensors(file.add, n)
    else:
        for il in range(n.n_layer + n.nextn_layers):
            _layer_tensors(file.add, n, il)
    file.add("output_norm.weight", (n.n_embd,), matrix=False)
    if not n.tied_embeddings:
        file.add("output.weight", (n.n_embd, n.n_vocab))


def _layer_tensors(add: Callable[..., None], n: _Numbers, il: int) -> None:
    """Layer il of a llama-style (or hybrid) model: a trunk layer, or past n_layer an MTP block."""
    trunk = il < n.n_layer
    hybrid = n.hybrid
    add(f"blk.{il}.attn_norm.weight", (n.n_embd,), matrix=False)
    if hybrid and trunk and (il + 1) % n.interval != 0:  # a gated delta-net layer
        _delta_net_tensors(add, n, il)
    else:
        q, kv = n.n_head * n.head_dim, n.n_head_kv * n.head_dim
        add(f"blk.{il}.attn_q.weight", (n.n_embd, 2 * q if hybrid else q))
        add(f"blk.{il}.attn_k.weight", (n.n_embd, kv))
        add(f"blk.{il}.attn_v.weight", (n.n_embd, kv))
        add(f"blk.{il}.attn_output.weight", (q, n.n_embd))
        if hybrid:
            add(f"blk.{il}.attn_q_norm.weight", (n.head_dim,), matrix=False)
            add(f"blk.{il}.attn_k_norm.weight", (n.head_dim,), matrix=False)
    add(f"blk.{il}.{'post_attention_norm' if hybrid else 'ffn_norm'}.weight", (n.n_embd,), matrix=False)
    if not trunk:  # the MTP block's own tensors (src/models/qwen35.cpp, load_block_mtp)
        add(f"blk.{il}.nextn.eh_proj.weight", (2 * n.n_embd, n.n_embd))
        for norm in ("enorm", "hnorm", "shared_head_norm"):
            add(f"blk.{il}.nextn.{norm}.weight", (n.n_embd,), matrix=False)
    if n.n_expert:  # a routed FFN, qwen3moe's layout: the router and three stacked expert tensors
        add(f"blk.{il}.ffn_gate_inp.weight", (n.n_embd, n.n_expert), matrix=False)
        add(f"blk.{il}.ffn_gate_exps.weight", (n.n_embd, n.n_ff_exp, n.n_expert))
        add(f"blk.{il}.ffn_up_exps.weight", (n.n_embd, n.n_ff_exp, n.n_expert))
        add(f"blk.{il}.ffn_down_exps.weight", (n.n_ff_exp, n.n_embd, n.n_expert))
        if n.n_ff_shared:  # the shared expert and its gate (qwen35moe, qwen2moe)
            add(f"blk.{il}.ffn_gate_inp_shexp.weight", (n.n_embd,), matrix=False)
            add(f"blk.{il}.ffn_gate_shexp.weight", (n.n_embd, n.n_ff_shared))
            add(f"blk.{il}.ffn_up_shexp.weight", (n.n_embd, n.n_ff_shared))
            add(f"blk.{il}.ffn_down_shexp.weight", (n.n_ff_shared, n.n_embd))
    else:
        add(f"blk.{il}.ffn_gate.weight", (n.n_embd, n.n_ff))
        add(f"blk.{il}.ffn_up.weight", (n.n_embd, n.n_ff))
        add(f"blk.{il}.ffn_down.weight", (n.n_ff, n.n_embd))


def _delta_net_tensors(add: Callable[..., None], n: _Numbers, il: int) -> None:
    """A hybrid model's recurrent layer il in place of attention: Qwen3.5's gated delta-net tensors."""
    key_dim, value_dim = n.ssm_state_size * n.ssm_group_count, n.ssm_state_size * n.ssm_time_step_rank
    add(f"blk.{il}.attn_qkv.weight", (n.n_embd, 2 * key_dim + value_dim))
    add(f"blk.{il}.attn_gate.weight", (n.n_embd, value_dim))
    add(f"blk.{il}.ssm_conv1d.weight", (n.ssm_conv_kernel, 2 * key_dim + value_dim), matrix=False)
    add(f"blk.{il}.ssm_dt.bias", (n.ssm_time_step_rank,), matrix=False)
    add(f"blk.{il}.ssm_a", (n.ssm_time_step_rank,), matrix=False)
    add(f"blk.{il}.ssm_beta.weight", (n.n_embd, n.ssm_time_step_rank))
    add(f"blk.{il}.ssm_alpha.weight", (n.n_embd, n.ssm_time_step_rank))
    add(f"blk.{il}.ssm_norm.weight", (n.ssm_state_size,), matrix=False)
    add(f"blk.{il}.ssm_out.weight", (value_dim, n.n_embd))


def _metadata(n: _Numbers) -> dict[str, Any]:
    """The GGUF keys the converter writes for these numbers, and that llama.cpp's loader reads back."""
    arch = n.architecture
    metadata: dict[str, Any] = {
        "general.architecture": arch,
        "general.name": n.name,
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


def _add_gemma4_metadata(metadata: dict[str, Any], n: _Numbers) -> None:
    """A gemma4's per-layer keys over the llama-style ones: KV heads and the window pattern a layer each."""
    arch, n_layer, every = n.architecture, n.n_layer, n.global_every
    pattern = [il % every != every - 1 for il in range(n_layer)]
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


def _gemma4_tensors(add: Callable[..., None], n: _Numbers) -> None:
    """The tensors of a gemma4 model between token_embd and output_norm, as src/models/gemma4.cpp creates them
    (load_arch_tensors): the per-layer embeddings, one rope_freqs for the global layers (llama.cpp duplicates
    it, the file holds it once), and per layer q / k / v / o at that layer's head size with q and k norms, the
    norms after attention and the FFN, the dense FFN, an MoE's router, experts and their norms beside it,
    and the per-layer input gate and projection. layer_output_scale (one number a layer) is left out."""
    n_layer, n_embd, n_head, n_ff = n.n_layer, n.n_embd, n.n_head, n.n_ff
    ple, every = n.n_embd_per_layer, n.global_every
    if ple:
        add("per_layer_token_embd.weight", (ple * n_layer, n.n_vocab))
        add("per_layer_model_proj.weight", (n_embd, ple * n_layer))
        add("per_layer_proj_norm.weight", (ple,), matrix=False)
    add("rope_freqs.weight", (n.head_dim_global // 2,), matrix=False)
    first_shared = n_layer - n.shared_kv_layers
    for il in range(n_layer):
        glob = il % every == every - 1
        hd, kv_heads = (n.head_dim_global, n.n_head_kv_global) if glob else (n.head_dim, n.n_head_kv)
        blk = f"blk.{il}."
        add(blk + "attn_norm.weight", (n_embd,), matrix=False)
        add(blk + "attn_q.weight", (n_embd, n_head * hd))
        if il < first_shared:  # a shared layer reads an earlier layer's K and V
            add(blk + "attn_k.weight", (n_embd, kv_heads * hd))
            if not (glob and n.k_eq_v):
                add(blk + "attn_v.weight", (n_embd, kv_heads * hd))
            add(blk + "attn_k_norm.weight", (hd,), matrix=False)
        add(blk + "attn_output.weight", (n_head * hd, n_embd))
        add(blk + "attn_q_norm.weight", (hd,), matrix=False)
        add(blk + "post_attention_norm.weight", (n_embd,), matrix=False)
        ff = n_ff * (2 if n.double_wide_ffn and il >= first_shared else 1)
        add(blk + "ffn_norm.weight", (n_embd,), matrix=False)
        add(blk + "ffn_gate.weight", (n_embd, ff))
        add(blk + "ffn_up.weight", (n_embd, ff))
        add(blk + "ffn_down.weight", (ff, n_embd))
        add(blk + "post_ffw_norm.weight", (n_embd,), matrix=False)
        if n.n_expert:  # the routed experts beside the dense FFN, each with its own norms
            n_expert, ff_exp = n.n_expert, n.n_ff_exp
            add(blk + "ffn_gate_inp.weight", (n_embd, n_expert), matrix=False)
            for norm in (
                "ffn_gate_inp.scale",
                "pre_ffw_norm_2.weight",
                "post_ffw_norm_1.weight",
                "post_ffw_norm_2.weight",
            ):
                add(blk + norm, (n_embd,), matrix=False)
            add(blk + "ffn_gate_exps.weight", (n_embd, ff_exp, n_expert))
            add(blk + "ffn_up_exps.weight", (n_embd, ff_exp, n_expert))
            add(blk + "ffn_down_exps.weight", (ff_exp, n_embd, n_expert))
        if ple:
            add(blk + "inp_gate.weight", (n_embd, ple))
            add(blk + "proj.weight", (ple, n_embd))
            add(blk + "post_norm.weight", (n_embd,), matrix=False)
