"""Each architecture's weight tensors, named and shaped as llama.cpp's converter writes them, from the model's
numbers alone. This is the one description of an architecture's tensors: a model planned before its download
(engine.planning.advice.model_numbers lays these tensors out as a GGUF would) and the catalog's parameter counts
(engine.models.catalog.Architecture) both read it, so a new architecture is described here once.

Covered: llama-style decoders (llama / qwen2 / qwen3 / gemma / mistral / phi3), routed FFNs (qwen3moe's
layout, with qwen35moe's shared expert), Qwen3.5's hybrid layers (gated delta-net beside attention) with
their MTP blocks, and Gemma 4's per-layer shapes. Norms are listed where they weigh in a plan; biases,
per-layer extras and vision towers are left out (well under 1 % of the bytes)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

# llm_arch_is_hybrid and the qwen filter in create_memory: attention where il < n_layer() and not is_recr(il)
HYBRID_ARCHITECTURES = frozenset({"qwen35", "qwen35moe", "qwen3next"})
DEFAULT_FULL_ATTENTION_INTERVAL = 4  # llama.cpp's full_attention_interval when the GGUF does not say
# llama-style architectures whose attention normalises q and k per head (src/models/qwen3.cpp, gemma3.cpp)
QK_NORM_ARCHITECTURES = frozenset({"qwen3", "qwen3moe", "gemma3"})
# those that normalise the attention's and the FFN's output too (src/models/gemma2-iswa.cpp, gemma3.cpp)
POST_NORM_ARCHITECTURES = frozenset({"gemma2", "gemma3"})


@dataclass(frozen=True)
class ArchitectureNumbers:
    """A decoder's shape as its config.json / GGUF header state it. The names are model_info_from_numbers'
    keywords; every field past n_ctx_train is 0 (or off) for an architecture that lacks the feature."""

    architecture: str  # general.architecture: llama, qwen2, qwen3moe, qwen35, gemma4, ...
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    tied_embeddings: bool = False
    # a mixture of experts (0: dense): experts per layer, experts each token uses, rows of one expert's FFN
    # (config.json: num_experts / num_local_experts, num_experts_per_tok, moe_intermediate_size). Every
    # layer's FFN is then a routed one, as in qwen3moe and gpt-oss; n_ff stays the GGUF's feed_forward_length.
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    n_ff_shared: int = 0  # rows of the shared expert beside the routed ones (shared_expert_intermediate_size)
    sliding_window: int | None = None  # the window of the layers that slide (engine.planning.memory.sliding_window)
    # a hybrid's gated delta-net layers (Qwen3.5: qwen35 / qwen35moe), the GGUF's full_attention_interval and
    # ssm.* keys: every full_attention_interval-th layer attends, the others carry a recurrent state
    # (engine.planning.memory.recurrent). Their config.json keys follow each field.
    full_attention_interval: int = 0  # full_attention_interval
    ssm_conv_kernel: int = 0  # linear_conv_kernel_dim
    ssm_state_size: int = 0  # linear_key_head_dim (= linear_value_head_dim in Qwen3.5)
    ssm_group_count: int = 0  # linear_num_key_heads
    ssm_time_step_rank: int = 0  # linear_num_value_heads
    ssm_inner_size: int = 0  # linear_num_value_heads x linear_value_head_dim
    # MTP (next-n) blocks after the trunk (mtp_num_hidden_layers), run by draft-mtp; in block_count, not in
    # the parameter count
    nextn_layers: int = 0
    # Gemma 4's layers differ one from the next (llama.cpp's gemma4): head_dim and n_head_kv are the sliding
    # layers'; every global_every-th layer is global, with other heads. engine.planning.advice.model_numbers writes
    # them as the GGUF keys engine.planning.memory.kv_layers and sliding_window read.
    global_every: int = 0  # layer il is global when il % global_every == global_every - 1 (config: layer_types)
    head_dim_global: int = 0  # global_head_dim
    # the global layers' KV heads: num_global_key_value_heads where attention_k_eq_v, else num_key_value_heads
    n_head_kv_global: int = 0
    shared_kv_layers: int = 0  # num_kv_shared_layers: the last ones keep no K/V and read earlier layers' caches
    n_embd_per_layer: int = 0  # hidden_size_per_layer_input: per-layer embeddings (E2B, E4B); 0: none
    k_eq_v: bool = False  # attention_k_eq_v: global layers have no V projection (the keys serve as values)
    double_wide_ffn: bool = False  # use_double_wide_mlp: the shared-KV layers' FFN is twice n_ff wide

    @property
    def hybrid(self) -> bool:
        return self.architecture in HYBRID_ARCHITECTURES

    @property
    def gemma4(self) -> bool:
        # without global_every a gemma4 is laid out llama-style, one shape for all layers (tests edit its keys)
        return self.architecture == "gemma4" and self.global_every > 0

    @property
    def interval(self) -> int:
        return self.full_attention_interval or DEFAULT_FULL_ATTENTION_INTERVAL

    def recurrent(self, il: int) -> bool:
        """Whether trunk layer il is a delta-net layer (a hybrid's layers attend every interval-th one)."""
        return self.hybrid and il < self.n_layer and (il + 1) % self.interval != 0

    def is_global(self, il: int) -> bool:
        """Whether Gemma 4's layer il attends globally: every global_every-th layer does."""
        return il % self.global_every == self.global_every - 1


@dataclass(frozen=True)
class TensorShape:
    """One tensor as the converter writes it: ggml's dimension order (the row length first)."""

    name: str
    shape: tuple[int, ...]
    matrix: bool  # multiplied by the activations and stored in the weight type; else kept F32 (norms, router)
    layer: int = -1  # the block it belongs to; -1 outside the blocks

    @property
    def n_elements(self) -> int:
        count = 1
        for d in self.shape:
            count *= d
        return count


class _Layout:
    """The tensors listed so far; add() keeps the converter's order."""

    def __init__(self) -> None:
        self.tensors: list[TensorShape] = []
        self.layer = -1

    def add(self, name: str, shape: tuple[int, ...], matrix: bool = True) -> None:
        self.tensors.append(TensorShape(name, shape, matrix, self.layer))


def tensor_layout(n: ArchitectureNumbers) -> list[TensorShape]:
    """Every tensor of the model, in the converter's order: token_embd, the layers (Gemma 4's per-layer
    embeddings before them), output_norm, and output unless the embeddings are tied."""
    out = _Layout()
    out.add("token_embd.weight", (n.n_embd, n.n_vocab))
    if n.gemma4:
        _gemma4_tensors(out, n)
    else:
        for il in range(n.n_layer + n.nextn_layers):
            out.layer = il
            _layer_tensors(out, n, il)
    out.layer = -1
    out.add("output_norm.weight", (n.n_embd,), matrix=False)
    if not n.tied_embeddings:
        out.add("output.weight", (n.n_embd, n.n_vocab))
    return out.tensors


def layer_tensors(n: ArchitectureNumbers, il: int) -> list[TensorShape]:
    """The tensors of block il alone (a llama-style or hybrid layer, or past n_layer an MTP block), for a
    writer that fills them with weights of its own (engine.models.synthetic)."""
    if n.gemma4:
        raise ValueError("a gemma4 model's layers are laid out together (tensor_layout)")
    out = _Layout()
    out.layer = il
    _layer_tensors(out, n, il)
    return out.tensors


# tables a token's id selects one row of: looked up, not multiplied
_LOOKUPS = frozenset({"token_embd.weight", "per_layer_token_embd.weight"})


@lru_cache(maxsize=512)
def parameter_count(n: ArchitectureNumbers, per_token: bool = False) -> int:
    """The weights of the trunk's matrices (every tensor of two or more dimensions: norms, biases and MTP
    blocks left out), as published parameter counts are given. per_token: those one token passes through,
    its n_expert_used experts only, the output matrix (the tied embeddings when there is none) and not the
    tables it looks a row up in."""
    total = 0
    for t in tensor_layout(n):
        if len(t.shape) < 2 or t.layer >= n.n_layer:
            continue
        if per_token and t.name in _LOOKUPS:
            continue
        count = t.n_elements
        if per_token and n.n_expert and t.name.endswith("_exps.weight"):
            count = count // n.n_expert * n.n_expert_used
        total += count
    if per_token and n.tied_embeddings:
        total += n.n_vocab * n.n_embd
    return total


def _layer_tensors(out: _Layout, n: ArchitectureNumbers, il: int) -> None:
    """Layer il of a llama-style (or hybrid) model: a trunk layer, or past n_layer an MTP block."""
    trunk, hybrid, blk = il < n.n_layer, n.hybrid, f"blk.{il}."
    out.add(blk + "attn_norm.weight", (n.n_embd,), matrix=False)
    if n.recurrent(il):
        _delta_net_tensors(out, n, blk)
    else:  # Qwen3.5's query projection also yields its output gate: twice the rows
        q, kv = n.n_head * n.head_dim, n.n_head_kv * n.head_dim
        out.add(blk + "attn_q.weight", (n.n_embd, 2 * q if hybrid else q))
        out.add(blk + "attn_k.weight", (n.n_embd, kv))
        out.add(blk + "attn_v.weight", (n.n_embd, kv))
        out.add(blk + "attn_output.weight", (q, n.n_embd))
        if hybrid or n.architecture in QK_NORM_ARCHITECTURES:
            out.add(blk + "attn_q_norm.weight", (n.head_dim,), matrix=False)
            out.add(blk + "attn_k_norm.weight", (n.head_dim,), matrix=False)
    post_norms = n.architecture in POST_NORM_ARCHITECTURES
    if post_norms:
        out.add(blk + "post_attention_norm.weight", (n.n_embd,), matrix=False)
    out.add(blk + ("post_attention_norm" if hybrid else "ffn_norm") + ".weight", (n.n_embd,), matrix=False)
    if not trunk:  # the MTP block's own tensors (src/models/qwen35.cpp, load_block_mtp)
        out.add(blk + "nextn.eh_proj.weight", (2 * n.n_embd, n.n_embd))
        for norm in ("enorm", "hnorm", "shared_head_norm"):
            out.add(blk + f"nextn.{norm}.weight", (n.n_embd,), matrix=False)
    if n.n_expert:
        _routed_ffn(out, n, blk)
    else:
        _dense_ffn(out, blk, n.n_embd, n.n_ff)
    if post_norms:
        out.add(blk + "post_ffw_norm.weight", (n.n_embd,), matrix=False)


def _dense_ffn(out: _Layout, blk: str, n_embd: int, n_ff: int) -> None:
    out.add(blk + "ffn_gate.weight", (n_embd, n_ff))
    out.add(blk + "ffn_up.weight", (n_embd, n_ff))
    out.add(blk + "ffn_down.weight", (n_ff, n_embd))


def _routed_ffn(out: _Layout, n: ArchitectureNumbers, blk: str) -> None:
    """qwen3moe's layout: the router (kept F32) and the experts' gate, up and down stacked in one tensor each;
    a shared expert and its gate beside them (qwen35moe, qwen2moe)."""
    out.add(blk + "ffn_gate_inp.weight", (n.n_embd, n.n_expert), matrix=False)
    out.add(blk + "ffn_gate_exps.weight", (n.n_embd, n.n_ff_exp, n.n_expert))
    out.add(blk + "ffn_up_exps.weight", (n.n_embd, n.n_ff_exp, n.n_expert))
    out.add(blk + "ffn_down_exps.weight", (n.n_ff_exp, n.n_embd, n.n_expert))
    if n.n_ff_shared:
        out.add(blk + "ffn_gate_inp_shexp.weight", (n.n_embd,), matrix=False)
        out.add(blk + "ffn_gate_shexp.weight", (n.n_embd, n.n_ff_shared))
        out.add(blk + "ffn_up_shexp.weight", (n.n_embd, n.n_ff_shared))
        out.add(blk + "ffn_down_shexp.weight", (n.n_ff_shared, n.n_embd))


def _delta_net_tensors(out: _Layout, n: ArchitectureNumbers, blk: str) -> None:
    """A hybrid model's recurrent layer in place of attention: Qwen3.5's gated delta-net tensors (qkv, the
    output gate z, the short convolution, alpha and beta, the output projection)."""
    key_dim, value_dim = n.ssm_state_size * n.ssm_group_count, n.ssm_state_size * n.ssm_time_step_rank
    out.add(blk + "attn_qkv.weight", (n.n_embd, 2 * key_dim + value_dim))
    out.add(blk + "attn_gate.weight", (n.n_embd, value_dim))
    out.add(blk + "ssm_conv1d.weight", (n.ssm_conv_kernel, 2 * key_dim + value_dim), matrix=False)
    out.add(blk + "ssm_dt.bias", (n.ssm_time_step_rank,), matrix=False)
    out.add(blk + "ssm_a", (n.ssm_time_step_rank,), matrix=False)
    out.add(blk + "ssm_beta.weight", (n.n_embd, n.ssm_time_step_rank))
    out.add(blk + "ssm_alpha.weight", (n.n_embd, n.ssm_time_step_rank))
    out.add(blk + "ssm_norm.weight", (n.ssm_state_size,), matrix=False)
    out.add(blk + "ssm_out.weight", (value_dim, n.n_embd))


def _gemma4_layers(n: ArchitectureNumbers) -> Iterator[tuple[int, bool, int, int, int]]:
    """Per Gemma 4 layer: (il, global, head_dim, KV heads, FFN rows). The shared-KV layers (the last
    shared_kv_layers) read earlier caches, and with double_wide_ffn their FFN is twice n_ff wide."""
    first_shared = n.n_layer - n.shared_kv_layers
    for il in range(n.n_layer):
        glob = n.is_global(il)
        hd, kv_heads = (n.head_dim_global, n.n_head_kv_global) if glob else (n.head_dim, n.n_head_kv)
        yield il, glob, hd, kv_heads, n.n_ff * (2 if n.double_wide_ffn and il >= first_shared else 1)


_GEMMA4_EXPERT_NORMS = (
    "ffn_gate_inp.scale",
    "pre_ffw_norm_2.weight",
    "post_ffw_norm_1.weight",
    "post_ffw_norm_2.weight",
)


def _gemma4_tensors(out: _Layout, n: ArchitectureNumbers) -> None:
    """The tensors of a gemma4 model between token_embd and output_norm, as src/models/gemma4.cpp creates them
    (load_arch_tensors): the per-layer embeddings, one rope_freqs for the global layers (llama.cpp duplicates
    it, the file holds it once), and per layer q / k / v / o at that layer's head size with q and k norms, the
    norms after attention and the FFN, the dense FFN, an MoE's router, experts and their norms beside it,
    and the per-layer input gate and projection. layer_output_scale (one number a layer) is left out."""
    n_embd, n_head, ple = n.n_embd, n.n_head, n.n_embd_per_layer
    if ple:
        out.add("per_layer_token_embd.weight", (ple * n.n_layer, n.n_vocab))
        out.add("per_layer_model_proj.weight", (n_embd, ple * n.n_layer))
        out.add("per_layer_proj_norm.weight", (ple,), matrix=False)
    out.add("rope_freqs.weight", (n.head_dim_global // 2,), matrix=False)
    first_shared = n.n_layer - n.shared_kv_layers
    for il, glob, hd, kv_heads, ff in _gemma4_layers(n):
        out.layer, blk = il, f"blk.{il}."
        out.add(blk + "attn_norm.weight", (n_embd,), matrix=False)
        out.add(blk + "attn_q.weight", (n_embd, n_head * hd))
        if il < first_shared:  # a shared layer reads an earlier layer's K and V
            out.add(blk + "attn_k.weight", (n_embd, kv_heads * hd))
            if not (glob and n.k_eq_v):
                out.add(blk + "attn_v.weight", (n_embd, kv_heads * hd))
            out.add(blk + "attn_k_norm.weight", (hd,), matrix=False)
        out.add(blk + "attn_output.weight", (n_head * hd, n_embd))
        out.add(blk + "attn_q_norm.weight", (hd,), matrix=False)
        out.add(blk + "post_attention_norm.weight", (n_embd,), matrix=False)
        out.add(blk + "ffn_norm.weight", (n_embd,), matrix=False)
        _dense_ffn(out, blk, n_embd, ff)
        out.add(blk + "post_ffw_norm.weight", (n_embd,), matrix=False)
        if n.n_expert:  # the routed experts beside the dense FFN, each with its own norms
            out.add(blk + "ffn_gate_inp.weight", (n_embd, n.n_expert), matrix=False)
            for norm in _GEMMA4_EXPERT_NORMS:
                out.add(blk + norm, (n_embd,), matrix=False)
            out.add(blk + "ffn_gate_exps.weight", (n_embd, n.n_ff_exp, n.n_expert))
            out.add(blk + "ffn_up_exps.weight", (n_embd, n.n_ff_exp, n.n_expert))
            out.add(blk + "ffn_down_exps.weight", (n.n_ff_exp, n_embd, n.n_expert))
        if ple:
            out.add(blk + "inp_gate.weight", (n_embd, ple))
            out.add(blk + "proj.weight", (ple, n_embd))
            out.add(blk + "post_norm.weight", (n_embd,), matrix=False)
