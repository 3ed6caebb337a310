"""llama.cpp's reserved compute buffer, as empirical fits (engine.planning.memory.memory_plan's "compute" items).

llama.cpp reserves the graph of one worst-case ubatch and ggml-alloc packs its tensors into one buffer,
reusing the memory of tensors no longer needed; the buffer is the highest offset it reaches. That depends on
which tensors are live at once (the "phases" below) and on where freed holes fall, which this module does
not simulate: each architecture's formula is the largest of a few phases fitted on generated models on the
CPU backend of the pinned llama.cpp, and every docstring states the error measured.
"""

from __future__ import annotations

from engine.models.gguf_inspect import ModelInfo
from engine.planning.memory.recurrent import recurrent_layout
from engine.planning.memory.sliding_window import SlidingWindow, sliding_window


def compute_buffer_bytes(info: ModelInfo, n_ctx: int, n_ubatch: int, n_outputs: int, flash_attn: bool = True) -> int:
    """llama.cpp's reserved compute buffer for one context: an empirical fit.

    llama.cpp reserves the worst-case graph (n_ubatch tokens, min(n_ubatch,
    n_outputs_max) outputs) and ggml-alloc packs its tensors; the peak is the
    largest of four phases, in bytes (T = n_ubatch tokens, E = n_embd,
    q = n_head * head_dim_k, F = n_ff, V = n_vocab, O = outputs, n_kv = padded context):

      attention  4*T*(3E + 2q) + mask + 24*T + 288
      FFN        4*T*(2F + 3E + q + (F if F > E + q else 0)) + mask + 24*T + 288
                 (only with 2 or more layers: the last layer runs its FFN on the
                 output rows alone; one F-row tensor of the FFN reuses the hole that
                 the attention's output and wo's leave, q + E floats a token, when it fits)
      output     4*O*V + 4*T*E + 12*O*E + 2064
      last FFN   4*O*(2F + 2E + (F if F > 2E else 0)) + 4*T*E   (the FFN on the output rows)
      mask       2*n_kv*T (f16, flash attention)

    Fitted on the CPU backend of the pinned llama.cpp (flash attention on, as
    llama.cpp's auto setting chooses) over 26 llama shapes x 3-4 contexts (E 128-4096,
    F/E 1-6, q/E 0.5-2, V 580-152k, contexts 300-16384). Error against llama.cpp's
    reported size: exact (within 32 bytes) where the FFN or attention phase dominates
    and q = E; the output phase within -4.9% .. +1.7% on models of 2 or more layers;
    FFN-dominated shapes with q != E exact too on the large-vocabulary cases below (with 4E
    in place of 3E + q and F > 2E as the condition they were -15% .. +12%); one-layer models with a
    large vocabulary down to -13%, and one-layer models at contexts of 256 or less down to
    -14%. Without flash attention the n_kv x T x n_head score
    matrix and an f32 mask are added to the attention phase (a rougher estimate).
    On CUDA the same graph is reserved; the fit is not verified there.

    Large vocabularies and narrow layers (Gemma 3 270M: V 262144, E 640): O is the context's own
    n_outputs_max, 65 as specrt loads a pair, n_parallel (1 by default) for a llama-server without
    speculation; at V 262144 each output row is 1 MiB of logits, so the plan is only as right as the O
    it is given (asked for 65 outputs where llama-server -np 1 -c 8192 reserved one, the plan said 66.7
    MiB for its 26.8 MiB: +149 %). Fitted on generated llama, qwen2 and gemma3 models (zero weights,
    tied embeddings; E 256-1024, q/E 0.5-4, F/E 1.5-8, V 131072-262144, 1-12 layers, windows 256-1024,
    contexts 512, 2048 and 4096) with 65 and 2 outputs, 105 cases: where a layer decides (2 outputs, 66
    cases) within -0.06% .. +0.01%; where the logits decide (65 outputs, 39 cases) -7.3% .. +0.8%, the
    -7.3% on E 1024 at context 2048 (what stays live below the logits is 1.1 to 2.8 times T x E floats,
    as ggml-alloc's holes fall; the fit counts 1.4). Held out, the real Gemma 3 270M Q4_K_M: -0.03% with 2 outputs at
    contexts 512-8192 (and against llama-server -np 1 -c 8192), +0.2% .. +0.5% with 65.

    A sliding-window model's two masks are _mask_cells'; a mixture-of-experts model's FFN phase is
    _moe_ffn_phase, a hybrid model's (Qwen3.5) _delta_net_phase and a hybrid MoE's _hybrid_moe_phase,
    each with the models it was fitted on and the error measured.

    Gemma 4 (gemma4_compute_buffer_bytes) and its assistant draft file have their own fits.
    """
    if info.architecture == "gemma4":
        return gemma4_compute_buffer_bytes(info, n_ctx, n_ubatch, n_outputs)
    if info.speculative_role == "gemma4-assistant":
        return gemma4_assistant_compute_buffer_bytes(info, n_ctx, n_ubatch, n_outputs)
    E, F = info.n_embd or 0, info.n_ff or 0
    q = (info.n_head or 0) * (info.head_dim_k or 0)
    V = info.vocab.n_tokens
    T, O = n_ubatch, min(n_ubatch, n_outputs)  # noqa: E741 (the formula's own names: tokens, outputs)
    small = 24 * T + 288
    cells = _mask_cells(info, n_ctx, T)
    if flash_attn:
        mask = 2 * cells * T
        attention = 4 * T * (3 * E + 2 * q) + mask + small
    else:
        mask = 4 * cells * T
        attention = 4 * n_ctx * T * (info.n_head or 0) + 4 * T * (3 * E + 2 * q) + mask + small
    last_layer_ffn = 4 * O * (2 * F + 2 * E + (F if F > 2 * E else 0)) + 4 * T * E
    phases = [attention, 4 * O * V + 4 * T * E + 12 * O * E + 2064, last_layer_ffn]
    layout = recurrent_layout(info)
    if (info.block_count or 0) >= 2:
        phases.append(_ffn_phase(info, T, q, mask, layout is not None))
    if layout and layout.n_recurrent:
        phases.append(_delta_net_phase(info, T, mask))
    return max(phases)


def gemma4_compute_buffer_bytes(info: ModelInfo, n_ctx: int, n_ubatch: int, n_outputs: int) -> int:
    """The compute buffer of a Gemma 4 (llama.cpp's gemma4 graph, src/models/gemma4.cpp): an empirical fit.

    Unlike llama's graph, gemma4's runs its last layer on every token and picks the output rows only after
    the final norm (embeddings_nextn_masked is off by default), so there is no last-FFN phase; its global
    layers' queries are wider (q_g = n_head * key_length, the global head size); it keeps two masks
    (sliding and global) live through the layers; its FFN is GELU-gated. The largest of (names as in
    compute_buffer_bytes, W = the sliding layers' cache cells, SlidingWindow.cells)

      attention  4*T*(3E + 2*q_g + F + 10) + mask + 288
      FFN        4*T*(2F + 5E + 10 + (F if F > 2E else 0)) + mask + 288
      output     4*O*V + 4*T*(5E + 1)
      mask       2*T*(n_kv + W)

    plus, for a model with per-layer embeddings (Gemma 4 E2B / E4B: embedding_length_per_layer_input P),
    their projected inputs, 4*T*n_layer*P, live through the whole graph (from the graph, not measured:
    the generator writes none). A Gemma 4 with MoE layers (26B-A4B) also takes compute_buffer_bytes' MoE
    phase (_moe_ffn_phase) with this mask (not measured either). Final-logit softcapping runs in place
    (measured: it adds nothing).

    Fitted on generated gemma4 models (testmodels.synthetic --gemma4: E 128-512, F/E 1-16, q_g/E 1-8,
    V 580-64000, windows 64 and 512, 12 and 18 layers with 0 and 6 shared-KV layers, contexts 256-4096):
    on models with two or more global layers (as every Gemma 4 is) exact to the byte in 66 of 84 cases;
    the others are decided by the output phase, within -11% .. +11% (where ggml-alloc puts the logits
    depends on the holes the masks and the last layer leave). On 6-layer models with one global layer (the
    generator's drafts), which free the sliding mask before their last layer: -11% .. +33%. The llama fit
    was 1% to 26% low on the same 84 cases.
    """
    E, F, V = info.n_embd or 0, info.n_ff or 0, info.vocab.n_tokens
    q_global = (info.n_head or 0) * (info.head_dim_k or 0)
    T, O = n_ubatch, min(n_ubatch, n_outputs)  # noqa: E741 (the formula's own names)
    mask = 2 * T * _mask_cells(info, n_ctx, T)
    per_layer = 4 * T * (info.block_count or 0) * (info._arch_int("embedding_length_per_layer_input") or 0)
    phases = [
        4 * T * (3 * E + 2 * q_global + F + 10) + mask + 288,
        4 * T * (2 * F + 5 * E + 10 + (F if F > 2 * E else 0)) + mask + 288,
        4 * O * V + 4 * T * (5 * E + 1),
    ]
    if moe_numbers(info)[0]:
        phases.append(_moe_ffn_phase(info, T, mask))
    return max(phases) + per_layer


def gemma4_assistant_compute_buffer_bytes(info: ModelInfo, n_ctx: int, n_ubatch: int, n_outputs: int) -> int:
    """The compute buffer of a Gemma 4 assistant's context (src/models/gemma4-assistant.cpp): an empirical fit.

    The assistant projects [target embedding ; target hidden state] to its own width E, runs its layers
    (queries only, over the target's caches, so both of the target's masks) on every token, and its output
    rows from the last layer's attention on. The largest of (names as in gemma4_compute_buffer_bytes, W
    from the assistant's own sliding_window, which is the target's)

      FFN        4*T*(2F + 5E + 2 + (F if F > 2E else 0)) + mask + 288
      attention  4*T*(3E + 2*q_g + 2) + mask + 288
      output     4*O*V + 8*O*E

    Fitted on generated assistants (testmodels.heads gemma4-assistant, for targets of
    E_t 64-512: E = 2*E_t, F = 2E, q_g/E 1-4, V 580-32000, contexts 256, 512 and 2048; 30 cases): exact to
    the byte in 14, all those of E 512 and 1024 where a layer phase decides and those where the output
    decides at T = 512; smaller assistants, over ggml-alloc's packing of their two layers: E 256 +7% ..
    +13%, E 128 +10% .. +30%; where the output decides at T = 256, -8.5% .. -5.8%. The llama fit was
    -15% .. +7% on the same cases. The generator's assistants all have F = 2E, so the F and E terms are
    not told apart.
    """
    E, F, V = info.n_embd or 0, info.n_ff or 0, info.vocab.n_tokens
    q_global = (info.n_head or 0) * (info.head_dim_k or 0)
    T, O = n_ubatch, min(n_ubatch, n_outputs)  # noqa: E741 (the formula's own names)
    window = info._arch_int("attention.sliding_window") or 0
    cells = n_ctx + (SlidingWindow(window, ()).cells(n_ctx, T) if window else 0)
    mask = 2 * T * cells
    phases = [
        4 * T * (2 * F + 5 * E + 2 + (F if F > 2 * E else 0)) + mask + 288,
        4 * T * (3 * E + 2 * q_global + 2) + mask + 288,
        4 * O * V + 8 * O * E,
    ]
    return max(phases)


def mtp_compute_buffer_bytes(info: ModelInfo, n_ctx: int, n_ubatch: int, n_outputs: int) -> int:
    """The compute buffer of the MTP context draft-mtp makes (one next-n block over the target's hidden
    state, then the output head): an empirical fit, the largest of three phases (names as in
    compute_buffer_bytes)

      block    4*T*(6E + 3)
      FFN      4*T*(4F - 3E + 3)
      output   4*O*V + 4*T*(2E + 3)

    plus the mask 2*n_ctx*T and 24*T + 288. Fitted on the MTP block of generated qwen35 models (E 128
    and 256, F/E 1-4, V 580 and 20000, context 512 and 2048): exact to the byte in all 6 cases. On one
    generated qwen35moe, whose MTP block has the MoE FFN (E 128, 8 experts, 2 used): exact at context 2048,
    11% low at 512. Not checked on glm4moe's MTP block nor on attention wider than E."""
    E, F, V = info.n_embd or 0, info.n_ff or 0, info.vocab.n_tokens
    T, O = n_ubatch, min(n_ubatch, n_outputs)  # noqa: E741 (the formula's own names)
    phases = [4 * T * (6 * E + 3), 4 * T * (4 * F - 3 * E + 3), 4 * O * V + 4 * T * (2 * E + 3)]
    return max(phases) + 2 * n_ctx * T + 24 * T + 288


def _ffn_phase(info: ModelInfo, T: int, q: int, mask: int, hybrid: bool) -> int:
    """compute_buffer_bytes' FFN phase (of a model of 2 or more layers), by the kind of FFN: llama's dense one,
    a routed MoE's, a hybrid's or a hybrid MoE's."""
    E, F = info.n_embd or 0, info.n_ff or 0
    if moe_numbers(info)[0]:
        return _hybrid_moe_phase(info, T, mask) if hybrid else _moe_ffn_phase(info, T, mask)
    if hybrid:  # fitted with the delta-net phase (see there)
        return 4 * T * (3 * F + 3 * E + 3) + mask + 24 * T + 320
    # the attention's output (q a token) and wo's (E) leave one hole that an F-row tensor reuses
    # only when F fits in it
    q_hole = q or E
    return 4 * T * (2 * F + 3 * E + q_hole + (F if F > E + q_hole else 0)) + mask + 24 * T + 288


def _moe_ffn_phase(info: ModelInfo, T: int, mask: int) -> int:
    """The FFN phase of a mixture-of-experts model, for compute_buffer_bytes and gemma4_compute_buffer_bytes.

    A mixture-of-experts model (n_expert X, K used, expert FFN rows G) replaces the FFN
    phase with its routed FFN, which holds K expert rows per token at once:

      MoE FFN    4*T*max(4E + K*E, 3*K*G + 3E + (E if K*G > E else 0)) + mask + 24*T + 288

    fitted on generated qwen3moe models (E 128-512, X 4-64, K 1-8, G 32-768, contexts
    512 and 2048): exact to the byte in 133 of 140 cases; the 7 others are one packing
    coincidence of ggml-alloc (K = 8 with K*G = 2E, where llama.cpp reserves 4*T*18E and
    the plan is low by up to 32 %).
    """
    E = info.n_embd or 0
    _, used, expert_ff = moe_numbers(info)
    routed = 3 * used * expert_ff + 3 * E + (E if used * expert_ff > E else 0)
    return 4 * T * max(4 * E + used * E, routed) + mask + 24 * T + 288


def _hybrid_moe_phase(info: ModelInfo, T: int, mask: int) -> int:
    """The FFN phase of a hybrid MoE, for compute_buffer_bytes.

    A hybrid MoE (qwen35moe) runs its routed experts and then a shared expert of S rows
    (expert_shared_feed_forward_length, default n_ff) beside them; its FFN phase is

      hybrid MoE  4*T*(3*max(K*G, S) + R) + mask + 320, with
                  R = (K + 4)*E + 9 when K*G <= 2E and K >= 4, 4E + 25 when K*G <= 2E and K < 4,
                  6E + 9 when K*G > 2E and K >= 4, 6E + 25 when K*G > 2E and K < 4

    fitted on generated qwen35moe models (E 128-512, S = n_ff E-4E, X 8, K 1-8, G E/8-2E, contexts 512
    and 2048): on the 8-layer targets exact in 61 of 72 cases and otherwise 0.2% to 11% high (the term
    R follows ggml-alloc's packing, not a clean phase: at K = 8 with K*G = 4E it is 4E, not 6E); on
    4-layer models, whose one attention layer is their last, 0% to 35% high. Before this fit (the MoE
    and delta-net phases alone) the same 144 cases were 0.2% to 43% low.
    """
    _, used, expert_ff = moe_numbers(info)
    return 4 * T * (3 * max(used * expert_ff, _shared_expert_rows(info)) + _hybrid_moe_rest(info)) + mask + 320


def _delta_net_phase(info: ModelInfo, T: int, mask: int) -> int:
    """The delta-net phase of a hybrid model with recurrent layers, for compute_buffer_bytes.

    A hybrid model (engine.planning.memory.recurrent: Qwen3.5) has its own FFN phase and a delta-net
    phase, C = conv channels of a delta-net layer (2 x ssm_state x ssm_groups + ssm_inner):

      hybrid FFN  4*T*(3F + 3E + 3) + mask + 24*T + 320
      delta-net   4*T*(3C + 3E + 15) + mask + 24*T + 288

    fitted on generated qwen35 models (E 128-512, F 256-2048, C 128-1536, contexts 512 and
    2048): within -0.11% .. +0.64% of llama.cpp in all 28 cases, exact in 16, with or without
    rollback snapshots (n_rs_seq 3 and 6 reserve the same). The attention and output phases are
    the llama fit's: on two generated hybrids with 32000 and 60000 vocabulary rows, where the
    output phase decides, 2.2% to 5.0% low.
    """
    E = info.n_embd or 0
    # the delta-net layer: its qkv projection, convolution and gated output, conv_dim channels a token
    d_state, d_inner = info._arch_int("ssm.state_size") or 0, info._arch_int("ssm.inner_size") or 0
    conv_dim = 2 * d_state * (info._arch_int("ssm.group_count") or 0) + d_inner
    return 4 * T * (3 * conv_dim + 3 * E + 15) + mask + 24 * T + 288


def moe_numbers(info: ModelInfo) -> tuple[int, int, int]:
    """(experts per layer, experts used per token, rows of an expert's FFN); (0, 0, 0) for a dense model.
    An expert's rows default to n_ff / n_expert_used, as llama.cpp's qwen3moe loader has it."""
    n_expert = info._arch_int("expert_count") or 0
    if not n_expert:
        return 0, 0, 0
    used = info._arch_int("expert_used_count") or n_expert
    expert_ff = info._arch_int("expert_feed_forward_length") or (info.n_ff or 0) // max(used, 1)
    return n_expert, used, expert_ff


def _mask_cells(info: ModelInfo, n_ctx: int, n_ubatch: int) -> int:
    """The KV cells the attention masks cover together: the full cache's for a model without sliding
    layers; otherwise the window cache's for its sliding layers plus the full cache's if any layer is
    global (llama.cpp's iswa input builds one mask per kind, and only those the graph uses).

    A sliding-window model (engine.planning.memory.sliding_window) has two masks, one over the full cache for
    its global layers and one over the window cache (SlidingWindow.cells) for its sliding ones, and both
    are live through the layers: mask = 2*T*(n_kv + window cells), either term dropped when no layer is
    of that kind. On generated gemma3 models (E 128-256, F/E 1-8, V 580 and 32000, 1-12 layers, windows
    64 and 512, contexts 512 and 2048: 28 cases) the llama phases with these masks are within -9.2% ..
    +10.7% of llama.cpp, exact in 2 (they were -24% .. +62% with one full-context mask, the +62% on a
    model with no global layer); gemma3's own layer (norms after attention and FFN) reserves what
    llama's does (compute_buffer_bytes' large-vocabulary cases, where its layers decide to the byte).
    """
    window = sliding_window(info)
    if window is None:
        return n_ctx
    n_global = len(window.layers) - window.n_sliding
    return (n_ctx if n_global else 0) + window.cells(n_ctx, n_ubatch)


def _shared_expert_rows(info: ModelInfo) -> int:
    """A qwen35moe layer's shared expert rows: expert_shared_feed_forward_length, else n_ff (its loader's
    default)."""
    return info._arch_int("expert_shared_feed_forward_length") or info.n_ff or 0


def _hybrid_moe_rest(info: ModelInfo) -> int:
    """R of the hybrid MoE phase (_hybrid_moe_phase): what is live beside the expert rows, in floats a token."""
    E = info.n_embd or 0
    _, used, expert_ff = moe_numbers(info)
    # the few floats a token beyond E's multiples: 9 with 4 or more experts a token, 25 with fewer
    rest = 9 if used >= 4 else 25
    if used * expert_ff > 2 * E:
        return 6 * E + rest
    return (used + 4) * E + rest if used >= 4 else 4 * E + rest
