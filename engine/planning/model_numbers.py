"""A model from its numbers, without a file: the tensors and GGUF keys llama.cpp's loader would find, so
that a catalog entry (engine.models.catalog) is planned (engine.planning.memory_plan) and its speed
predicted (engine.planning.speed_model) before anything is downloaded, and so that tests can build a
model of any shape in memory."""

from __future__ import annotations

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
    if n_expert and not (1 <= n_expert_used <= n_expert and n_ff_exp > 0):
        raise PlanError("an MoE model needs 1 <= n_expert_used <= n_expert and n_ff_exp > 0")
    numbers = dict(
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_ff=n_ff,
        n_vocab=n_vocab,
        n_ctx_train=n_ctx_train,
    )
    bad = [k for k, v in numbers.items() if not isinstance(v, int) or v <= 0]
    if bad:
        raise PlanError(f"model numbers must be positive integers: {', '.join(bad)}")
    weight_type = weight_type.upper()
    if weight_type not in GGML_TYPE_IDS:
        raise PlanError(f"unknown ggml type {weight_type!r}")
    if bits_per_weight is not None and not 0 < bits_per_weight <= 32:
        raise PlanError(f"bits per weight must be in (0, 32], got {bits_per_weight}")
    tensors: list[TensorInfo] = []
    offset = 0

    def add(tensor_name: str, shape: tuple[int, ...], matrix: bool = True) -> None:
        nonlocal offset
        type_name = weight_type if matrix else "F32"
        fallback = matrix and shape[0] % _block(type_name) != 0
        if fallback:
            type_name = _QUANT_FALLBACK.get(type_name, type_name)
            if shape[0] % _block(type_name):
                type_name = "F16"
        n_elements = 1
        for d in shape:
            n_elements *= d
        if matrix and bits_per_weight is not None and not fallback:
            n_bytes = int(-(-n_elements * bits_per_weight // 8))
        else:
            n_bytes = ggml_row_bytes(type_name, shape[0]) * (n_elements // shape[0])
        tensors.append(TensorInfo(tensor_name, shape, type_name, GGML_TYPE_IDS[type_name], offset, n_elements, n_bytes))
        offset += align(n_bytes, CPU_ALIGNMENT)

    hybrid = architecture in HYBRID_ARCHITECTURES
    if hybrid and not all(
        v > 0 for v in (ssm_conv_kernel, ssm_state_size, ssm_group_count, ssm_time_step_rank, ssm_inner_size)
    ):
        raise PlanError(f"a {architecture} model needs its ssm sizes (conv kernel, state, groups, rank, inner)")
    interval = full_attention_interval or DEFAULT_FULL_ATTENTION_INTERVAL
    q, kv = n_head * head_dim, n_head_kv * head_dim
    # without global_every a gemma4 is planned llama-style, one shape for all layers (tests edit its keys)
    gemma4 = architecture == "gemma4" and global_every > 0
    if gemma4 and not (head_dim_global > 0 and n_head_kv_global > 0 and sliding_window):
        raise PlanError("a gemma4 model needs head_dim_global, n_head_kv_global and sliding_window")
    add("token_embd.weight", (n_embd, n_vocab))
    if gemma4:
        layout = dict(
            global_every=global_every,
            head_dim_global=head_dim_global,
            n_head_kv_global=n_head_kv_global,
            shared_kv_layers=shared_kv_layers,
            n_embd_per_layer=n_embd_per_layer,
            k_eq_v=k_eq_v,
            double_wide_ffn=double_wide_ffn,
            n_expert=n_expert,
            n_ff_exp=n_ff_exp,
        )
        _gemma4_tensors(add, n_layer, n_embd, n_head, head_dim, n_head_kv, n_ff, n_vocab, layout)
    for il in range(0 if gemma4 else n_layer + nextn_layers):
        trunk = il < n_layer
        add(f"blk.{il}.attn_norm.weight", (n_embd,), matrix=False)
        if hybrid and trunk and (il + 1) % interval != 0:  # a gated delta-net layer
            key_dim, value_dim = ssm_state_size * ssm_group_count, ssm_state_size * ssm_time_step_rank
            add(f"blk.{il}.attn_qkv.weight", (n_embd, 2 * key_dim + value_dim))
            add(f"blk.{il}.attn_gate.weight", (n_embd, value_dim))
            add(f"blk.{il}.ssm_conv1d.weight", (ssm_conv_kernel, 2 * key_dim + value_dim), matrix=False)
            add(f"blk.{il}.ssm_dt.bias", (ssm_time_step_rank,), matrix=False)
            add(f"blk.{il}.ssm_a", (ssm_time_step_rank,), matrix=False)
            add(f"blk.{il}.ssm_beta.weight", (n_embd, ssm_time_step_rank))
            add(f"blk.{il}.ssm_alpha.weight", (n_embd, ssm_time_step_rank))
            add(f"blk.{il}.ssm_norm.weight", (ssm_state_size,), matrix=False)
            add(f"blk.{il}.ssm_out.weight", (value_dim, n_embd))
        else:
            add(f"blk.{il}.attn_q.weight", (n_embd, 2 * q if hybrid else q))
            add(f"blk.{il}.attn_k.weight", (n_embd, kv))
            add(f"blk.{il}.attn_v.weight", (n_embd, kv))
            add(f"blk.{il}.attn_output.weight", (q, n_embd))
            if hybrid:
                add(f"blk.{il}.attn_q_norm.weight", (head_dim,), matrix=False)
                add(f"blk.{il}.attn_k_norm.weight", (head_dim,), matrix=False)
        add(f"blk.{il}.{'post_attention_norm' if hybrid else 'ffn_norm'}.weight", (n_embd,), matrix=False)
        if not trunk:  # the MTP block's own tensors (src/models/qwen35.cpp, load_block_mtp)
            add(f"blk.{il}.nextn.eh_proj.weight", (2 * n_embd, n_embd))
            for norm in ("enorm", "hnorm", "shared_head_norm"):
                add(f"blk.{il}.nextn.{norm}.weight", (n_embd,), matrix=False)
        if n_expert:  # a routed FFN, qwen3moe's layout: the router and three stacked expert tensors
            add(f"blk.{il}.ffn_gate_inp.weight", (n_embd, n_expert), matrix=False)
            add(f"blk.{il}.ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert))
            add(f"blk.{il}.ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert))
            add(f"blk.{il}.ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert))
            if n_ff_shared:  # the shared expert and its gate (qwen35moe, qwen2moe)
                add(f"blk.{il}.ffn_gate_inp_shexp.weight", (n_embd,), matrix=False)
                add(f"blk.{il}.ffn_gate_shexp.weight", (n_embd, n_ff_shared))
                add(f"blk.{il}.ffn_up_shexp.weight", (n_embd, n_ff_shared))
                add(f"blk.{il}.ffn_down_shexp.weight", (n_ff_shared, n_embd))
            continue
        add(f"blk.{il}.ffn_gate.weight", (n_embd, n_ff))
        add(f"blk.{il}.ffn_up.weight", (n_embd, n_ff))
        add(f"blk.{il}.ffn_down.weight", (n_ff, n_embd))
    add("output_norm.weight", (n_embd,), matrix=False)
    if not tied_embeddings:
        add("output.weight", (n_embd, n_vocab))
    metadata = {
        "general.architecture": architecture,
        "general.name": name,
        f"{architecture}.block_count": n_layer + nextn_layers,
        f"{architecture}.embedding_length": n_embd,
        f"{architecture}.attention.head_count": n_head,
        f"{architecture}.attention.head_count_kv": n_head_kv,
        f"{architecture}.attention.key_length": head_dim,
        f"{architecture}.attention.value_length": head_dim,
        f"{architecture}.feed_forward_length": n_ff,
        f"{architecture}.context_length": n_ctx_train,
    }
    if sliding_window:
        metadata[f"{architecture}.attention.sliding_window"] = sliding_window
    if nextn_layers:
        metadata[f"{architecture}.nextn_predict_layers"] = nextn_layers
    if hybrid:
        metadata[f"{architecture}.full_attention_interval"] = interval
        metadata[f"{architecture}.ssm.conv_kernel"] = ssm_conv_kernel
        metadata[f"{architecture}.ssm.state_size"] = ssm_state_size
        metadata[f"{architecture}.ssm.group_count"] = ssm_group_count
        metadata[f"{architecture}.ssm.time_step_rank"] = ssm_time_step_rank
        metadata[f"{architecture}.ssm.inner_size"] = ssm_inner_size
    if n_ff_shared:
        metadata[f"{architecture}.expert_shared_feed_forward_length"] = n_ff_shared
    if n_expert:
        metadata[f"{architecture}.expert_count"] = n_expert
        metadata[f"{architecture}.expert_used_count"] = n_expert_used
        metadata[f"{architecture}.expert_feed_forward_length"] = n_ff_exp
    if gemma4:
        pattern = [il % global_every != global_every - 1 for il in range(n_layer)]
        first_shared = n_layer - shared_kv_layers
        metadata.update(
            {
                f"{architecture}.attention.head_count_kv": [n_head_kv if s else n_head_kv_global for s in pattern],
                f"{architecture}.attention.key_length": head_dim_global,
                f"{architecture}.attention.value_length": head_dim_global,
                f"{architecture}.attention.key_length_swa": head_dim,
                f"{architecture}.attention.value_length_swa": head_dim,
                f"{architecture}.attention.sliding_window_pattern": pattern,
                f"{architecture}.attention.shared_kv_layers": shared_kv_layers,
                f"{architecture}.embedding_length_per_layer_input": n_embd_per_layer,
            }
        )
        if double_wide_ffn:  # llama.cpp reads feed_forward_length as a scalar or one entry per layer
            metadata[f"{architecture}.feed_forward_length"] = [
                n_ff * (2 if il >= first_shared else 1) for il in range(n_layer)
            ]
    vocab = VocabInfo(None, None, "BPE", n_vocab, -1, -1, False, False, None, None)
    return ModelInfo(
        path=f"<{name or architecture} from numbers>",
        file_size=offset,
        version=3,
        alignment=CPU_ALIGNMENT,
        data_offset=0,
        metadata=metadata,
        tensors=tensors,
        vocab=vocab,
    )


def _gemma4_tensors(add, n_layer, n_embd, n_head, head_dim, n_head_kv, n_ff, n_vocab, kw) -> None:
    """The tensors of a gemma4 model between token_embd and output_norm, as src/models/gemma4.cpp creates them
    (load_arch_tensors): the per-layer embeddings, one rope_freqs for the global layers (llama.cpp duplicates
    it, the file holds it once), and per layer q / k / v / o at that layer's head size with q and k norms, the
    norms after attention and the FFN, the dense FFN, an MoE's router, experts and their norms beside it,
    and the per-layer input gate and projection. layer_output_scale (one number a layer) is left out."""
    ple, every = kw["n_embd_per_layer"], kw["global_every"]
    if ple:
        add("per_layer_token_embd.weight", (ple * n_layer, n_vocab))
        add("per_layer_model_proj.weight", (n_embd, ple * n_layer))
        add("per_layer_proj_norm.weight", (ple,), matrix=False)
    add("rope_freqs.weight", (kw["head_dim_global"] // 2,), matrix=False)
    first_shared = n_layer - kw["shared_kv_layers"]
    for il in range(n_layer):
        glob = il % every == every - 1
        hd, kv_heads = (kw["head_dim_global"], kw["n_head_kv_global"]) if glob else (head_dim, n_head_kv)
        blk = f"blk.{il}."
        add(blk + "attn_norm.weight", (n_embd,), matrix=False)
        add(blk + "attn_q.weight", (n_embd, n_head * hd))
        if il < first_shared:  # a shared layer reads an earlier layer's K and V
            add(blk + "attn_k.weight", (n_embd, kv_heads * hd))
            if not (glob and kw["k_eq_v"]):
                add(blk + "attn_v.weight", (n_embd, kv_heads * hd))
            add(blk + "attn_k_norm.weight", (hd,), matrix=False)
        add(blk + "attn_output.weight", (n_head * hd, n_embd))
        add(blk + "attn_q_norm.weight", (hd,), matrix=False)
        add(blk + "post_attention_norm.weight", (n_embd,), matrix=False)
        ff = n_ff * (2 if kw["double_wide_ffn"] and il >= first_shared else 1)
        add(blk + "ffn_norm.weight", (n_embd,), matrix=False)
        add(blk + "ffn_gate.weight", (n_embd, ff))
        add(blk + "ffn_up.weight", (n_embd, ff))
        add(blk + "ffn_down.weight", (ff, n_embd))
        add(blk + "post_ffw_norm.weight", (n_embd,), matrix=False)
        if kw["n_expert"]:  # the routed experts beside the dense FFN, each with its own norms
            n_expert, ff_exp = kw["n_expert"], kw["n_ff_exp"]
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
