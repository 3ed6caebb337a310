"""Small llama-architecture GGUF target/draft pairs, written offline in seconds.

The CPU probe (engine.measure.device_probe) and the demo's fallback pair (engine.measure.demo) write
their models with it at run time, which is why it lives in the engine; its command line, with an option
per variant below, is the test kit's: ``python -m testmodels.synthetic OUT``.

The draft is derived from the target: it has the target's token embeddings,
output head and first ``draft_layers`` blocks. The target adds further blocks
whose contribution to the residual stream is scaled by ``divergence``. At
divergence 0 the extra blocks add nothing and the draft predicts exactly what
the target does (greedy acceptance 1.0); raising it makes the two disagree more
often, so acceptance is controllable and well above zero for small values.

Both files share one SentencePiece-style vocabulary (bytes, printable ASCII and
prefixes of common English and Python words, so every piece is reachable by
llama.cpp's merges), which satisfies llama.cpp's draft/target vocab rule.

``--n-expert E --n-expert-used K`` writes a mixture-of-experts pair instead, of the
qwen3moe architecture (llama.cpp runs it; Qwen3-30B-A3B's layout): each block's FFN is
E experts of ``--n-ff-exp`` rows with a router, K of them active per token.

``--sliding-window N`` writes a gemma3 pair instead (Gemma 3's layout: q/k norms and
norms after attention and after the FFN), five of every six layers attending over the
last N tokens only, so sliding-window KV caches are tested on what llama.cpp builds.

``--hybrid`` writes a qwen35 pair instead (Qwen3.5's layout): three of every four layers are
gated delta-net layers with a recurrent state in place of a KV cache, the fourth full
attention with a gated query, so recurrent and hybrid caches are tested on what llama.cpp
builds. With ``--mtp`` the target also carries Qwen3.5's next-token-prediction (MTP) block,
which draft-mtp drafts with: it predicts from the last token alone (the bigram of the
embeddings and output head), so it agrees with the target less often than the draft does.
``--hybrid --n-expert E --n-expert-used K`` writes a qwen35moe pair (Qwen3.5's MoE layout): the same layers
with a routed FFN of E experts and a shared expert of n_ff rows (llama.cpp's default width) beside it.

``--gemma4`` writes a dense gemma4 pair instead (Gemma 4's layout): five of every six layers
slide over ``--sliding-window`` tokens (default 64) with heads of n_embd / n_head, the sixth is
global, with heads twice as wide and half as many KV heads (``--head-dim-global``,
``--n-head-kv-global``), and rotates by the shared ``rope_freqs`` factors; q/k norms, norms after
attention and after the FFN, no per-layer embeddings. ``--shared-kv-layers N`` makes the target's
last N layers keep no KV cache and read the last sliding and global layers' caches before them, as
Gemma 4 E2B / E4B do. The norms after attention and after the FFN carry the divergence
(they rescale each block's output, so a scaled projection alone would be normalised away).

``--chat-template chatml`` (or a path to a jinja file) writes a chat template into
both files, with ChatML's <|im_start|> / <|im_end|> as control tokens, so chat mode
is tested on what an instruct model carries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from engine.models.tensor_layout import ArchitectureNumbers, layer_tensors

WORDS = (
    "the of and to in is that for it as with was on be by this are from at or an have not "
    "but which all one their has were can more will if when there so what about other into "
    "def return self import class None True False for while with yield lambda print value "
    "list dict name data file path line text time number result error string index count "
    "model token draft target speed cache batch layer"
).split()

SPACE = "\u2581"  # SentencePiece's word-boundary marker

# ChatML, written for SpecTune's test models: each message between <|im_start|>role and
# <|im_end|>, then the opening of the assistant's turn
CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
# qwen35's recurrent (gated delta-net) layers, as Qwen3.5 0.8B-9B shape them in miniature: a state of
# SSM_STATE x SSM_STATE per value head, SSM_GROUPS key heads, SSM_V_HEADS value heads
FULL_ATTENTION_INTERVAL = 4
SSM_CONV_KERNEL = 4
SSM_STATE = 16
SSM_GROUPS = 2
SSM_V_HEADS = 4
HYBRID_LAYERS = (8, 4)  # the default target and draft depth of a hybrid pair: two and one attention layers
# gemma4: layer il is global when il % GEMMA4_PERIOD == GEMMA4_PERIOD - 1 (five sliding to one global)
GEMMA4_PERIOD = 6
GEMMA4_LAYERS = (12, 6)  # the default target and draft depth of a gemma4 pair: two and one global layers
GEMMA4_WINDOW = 64  # the default window of a gemma4 pair, in tokens

CHAT_TOKENS = ("<|im_start|>", "<|im_end|>")  # control tokens; llama.cpp ends a generation at <|im_end|>


@dataclasses.dataclass(frozen=True)
class ModelShape:
    n_embd: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 256
    n_ctx_train: int = 4096
    n_expert: int = 0  # 0: a dense llama; otherwise a qwen3moe with this many experts per layer
    n_expert_used: int = 0
    n_ff_exp: int = 0  # rows of each expert's FFN (0: n_ff // n_expert_used, llama.cpp's default)
    sliding_window: int = 0  # > 0: a dense gemma3, five of every six layers attending over this many tokens
    # a qwen35: gated delta-net layers, full attention every FULL_ATTENTION_INTERVAL-th (qwen35moe with n_expert)
    hybrid: bool = False
    # a dense gemma4 (sliding_window > 0 is its window): global layers with heads of head_dim_global (0: twice
    # the sliding layers') and n_head_kv_global KV heads (0: half the sliding layers', at least one); the
    # last shared_kv_layers layers keep no KV cache
    gemma4: bool = False
    head_dim_global: int = 0
    n_head_kv_global: int = 0
    shared_kv_layers: int = 0

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 0

    @property
    def arch(self) -> str:
        if self.gemma4:
            return "gemma4"
        if self.sliding_window:
            return "gemma3"
        if self.hybrid:
            return "qwen35moe" if self.is_moe else "qwen35"
        return "qwen3moe" if self.is_moe else "llama"

    @property
    def expert_ff(self) -> int:
        return self.n_ff_exp or self.n_ff // max(self.n_expert_used, 1)

    def numbers(self, n_layer: int | None = None, n_vocab: int = 0, mtp: bool = False) -> ArchitectureNumbers:
        """This shape as engine.models.tensor_layout describes an architecture: the tensors a written model
        holds are those it lists. n_layer: the model's depth (the draft's is shallower); n_vocab: 0 where
        only the blocks matter; mtp: a hybrid target's MTP block after its trunk."""
        head_dim, n_layer = self.n_embd // self.n_head, n_layer or self.n_layer
        extra: dict[str, Any] = {}
        if self.hybrid:  # the shared expert of a qwen35moe is n_ff rows wide
            extra.update(
                full_attention_interval=FULL_ATTENTION_INTERVAL,
                ssm_conv_kernel=SSM_CONV_KERNEL,
                ssm_state_size=SSM_STATE,
                ssm_group_count=SSM_GROUPS,
                ssm_time_step_rank=SSM_V_HEADS,
                ssm_inner_size=SSM_STATE * SSM_V_HEADS,
                n_ff_shared=self.n_ff if self.is_moe else 0,
                nextn_layers=1 if mtp else 0,
            )
        if self.gemma4:
            head_dim_global, n_head_kv_global = self.gemma4_attention(GEMMA4_PERIOD - 1)
            extra.update(
                global_every=GEMMA4_PERIOD,
                head_dim_global=head_dim_global,
                n_head_kv_global=n_head_kv_global,
                # the target's last shared_kv_layers share; a draft (its first layers) keeps a cache in each
                shared_kv_layers=max(0, n_layer - (self.n_layer - self.shared_kv_layers)),
            )
        return ArchitectureNumbers(
            architecture=self.arch,
            n_layer=n_layer,
            n_embd=self.n_embd,
            n_head=self.n_head,
            n_head_kv=self.n_head_kv,
            head_dim=head_dim,
            n_ff=self.n_ff,
            n_vocab=n_vocab,
            n_ctx_train=self.n_ctx_train,
            n_expert=self.n_expert,
            n_expert_used=self.n_expert_used,
            n_ff_exp=self.expert_ff,
            sliding_window=self.sliding_window or None,
            **extra,
        )

    def gemma4_attention(self, layer: int) -> tuple[int, int]:
        """(head size, KV heads) of a gemma4 layer: the sliding layers' or the global layers'."""
        if gemma4_is_sliding(layer):
            return self.n_embd // self.n_head, self.n_head_kv
        return (
            self.head_dim_global or 2 * (self.n_embd // self.n_head),
            self.n_head_kv_global or max(self.n_head_kv // 2, 1),
        )


@dataclasses.dataclass(frozen=True)
class PairSpec:
    shape: ModelShape = ModelShape()
    draft_layers: int = 1
    divergence: float = 0.12
    seed: int = 1234
    dtype: str = "f32"  # f32 | f16 | q8_0
    name: str = "spectune-synthetic"
    # pad the vocabulary with unused tokens to this size (0: only the pieces), so that the embeddings and
    # the output layer weigh what a real model's do (32000 for Llama 2 and Mistral)
    n_vocab: int = 0
    chat_template: str | None = None  # jinja text written to tokenizer.chat_template (None: a base model)
    # hybrid only: the target carries Qwen3.5's multi-token-prediction block after its trunk (draft-mtp)
    mtp: bool = False


def build_vocab(variant: int = 0, n_vocab: int = 0, chat: bool = False) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types (gguf.TokenType values).

    A nonzero ``variant`` swaps the text of two word pieces: a vocabulary of the
    same size and type that llama.cpp's draft/target rule rejects. ``n_vocab`` pads
    with unused tokens up to that size. ``chat`` adds ChatML's control tokens after the
    pieces.
    """
    import gguf

    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    scores = [0.0, 0.0, 0.0]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(gguf.TokenType.BYTE)
        scores.append(0.0)
    seen = set(tokens)
    pieces: list[str] = [SPACE] + [chr(c) for c in range(33, 127)]
    for word in WORDS:
        full = SPACE + word
        for end in range(2, len(full) + 1):
            pieces.append(full[:end])
    for piece in pieces:
        if piece in seen:
            continue
        seen.add(piece)
        tokens.append(piece)
        types.append(gguf.TokenType.NORMAL)
        # longer pieces merge first
        scores.append(float(len(piece)) - len(tokens) * 1e-4)
    if variant:
        i, j = len(tokens) - 1 - variant, len(tokens) - 2 - variant
        tokens[i], tokens[j] = tokens[j], tokens[i]
    if chat:
        for special in CHAT_TOKENS:
            tokens.append(special)
            types.append(gguf.TokenType.CONTROL)
            scores.append(0.0)
    for n in range(len(tokens), n_vocab):
        tokens.append(f"<unused{n}>")
        types.append(gguf.TokenType.UNUSED)
        scores.append(0.0)
    return tokens, scores, [int(t) for t in types]


def _block_tensors(rng: np.random.Generator, shape: ModelShape, scale_out: float, layer: int) -> dict[str, np.ndarray]:
    def w(*dims: int, gain: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(dims) * gain / np.sqrt(dims[-1])).astype(np.float32)

    if shape.hybrid:
        return _qwen35_block(rng, shape, scale_out, layer, w)
    if shape.gemma4:
        return _gemma4_block(shape, scale_out, layer, w)
    # the tensors llama.cpp's converter writes for this architecture (engine.models.tensor_layout), filled
    # with random matrices and unit norms; numpy's shape is GGUF's reversed ({n_embd, n_ff} is (n_ff, n_embd))
    block = {}
    for t in layer_tensors(shape.numbers(), layer):
        key = t.name.removeprefix(f"blk.{layer}.")
        dims = t.shape[::-1]
        if len(dims) == 1:
            block[key] = np.ones(dims, dtype=np.float32)
        else:
            block[key] = w(*dims, gain=scale_out if key in _OUTPUT_PROJECTIONS else _GAINS.get(key, 1.0))
    return block


# the matrices that write back into the residual stream: scaled by the draft's divergence in the target's
# layers past the draft's; and a sharp router, so that tokens prefer different experts
_OUTPUT_PROJECTIONS = frozenset({"attn_output.weight", "ffn_down.weight", "ffn_down_exps.weight"})
_GAINS = {"ffn_gate_inp.weight": 4.0}


def qwen35_is_recurrent(layer: int) -> bool:
    """llama.cpp's default for qwen35 without a recurrent-layers key: full attention every fourth layer."""
    return (layer + 1) % FULL_ATTENTION_INTERVAL != 0


def gemma4_is_sliding(layer: int) -> bool:
    """The pattern written into a generated gemma4's attention.sliding_window_pattern."""
    return layer % GEMMA4_PERIOD != GEMMA4_PERIOD - 1


def _gemma4_block(
    shape: ModelShape, scale_out: float, layer: int, w: Callable[..., np.ndarray]
) -> dict[str, np.ndarray]:
    # numpy's shapes are GGUF's reversed. The norms after attention and after the FFN scale the block's
    # output: they carry the divergence. A layer that shares an earlier layer's KV cache has no K or V.
    d, ff = shape.n_embd, shape.n_ff
    head_dim, n_head_kv = shape.gemma4_attention(layer)
    block = {
        "attn_norm.weight": np.ones(d, dtype=np.float32),
        "attn_q.weight": w(shape.n_head * head_dim, d),
        "attn_output.weight": w(d, shape.n_head * head_dim),
        "attn_q_norm.weight": np.ones(head_dim, dtype=np.float32),
        "post_attention_norm.weight": np.full(d, scale_out, dtype=np.float32),
        "ffn_norm.weight": np.ones(d, dtype=np.float32),
        "ffn_gate.weight": w(ff, d),
        "ffn_up.weight": w(ff, d),
        "ffn_down.weight": w(d, ff),
        "post_ffw_norm.weight": np.full(d, scale_out, dtype=np.float32),
    }
    if layer < shape.n_layer - shape.shared_kv_layers:
        block["attn_k.weight"] = w(n_head_kv * head_dim, d)
        block["attn_v.weight"] = w(n_head_kv * head_dim, d)
        block["attn_k_norm.weight"] = np.ones(head_dim, dtype=np.float32)
    return block


def _write_gemma4_keys(w: Any, shape: ModelShape, n_layer: int, role: str) -> None:
    """Gemma 4's attention keys: per-layer KV heads, both head sizes, the pattern, shared KV layers."""
    sliding_dim = shape.n_embd // shape.n_head
    global_dim = shape.gemma4_attention(GEMMA4_PERIOD - 1)[0]
    w.add_head_count_kv([shape.gemma4_attention(il)[1] for il in range(n_layer)])
    w.add_key_length(global_dim)
    w.add_value_length(global_dim)
    w.add_key_length_swa(sliding_dim)
    w.add_value_length_swa(sliding_dim)
    w.add_rope_dimension_count(global_dim)
    w.add_rope_dimension_count_swa(sliding_dim)
    w.add_rope_freq_base(1_000_000.0)
    w.add_rope_freq_base_swa(10_000.0)
    w.add_sliding_window(shape.sliding_window)
    w.add_sliding_window_pattern([gemma4_is_sliding(il) for il in range(n_layer)])
    w.add_embedding_length_per_layer_input(0)
    if role == "target" and shape.shared_kv_layers:
        w.add_shared_kv_layers(shape.shared_kv_layers)


def _qwen35_block(
    rng: np.random.Generator, shape: ModelShape, scale_out: float, layer: int, w: Callable[..., np.ndarray]
) -> dict[str, np.ndarray]:
    # numpy's shapes are GGUF's reversed; there is no ffn_norm: post_attention_norm feeds the FFN
    d, ff = shape.n_embd, shape.n_ff
    head_dim = d // shape.n_head
    block = {
        "attn_norm.weight": np.ones(d, dtype=np.float32),
        "post_attention_norm.weight": np.ones(d, dtype=np.float32),
    }
    if shape.is_moe:
        # qwen35moe: routed experts stacked in one tensor each, and a shared expert (n_ff rows, llama.cpp's
        # default when expert_shared_feed_forward_length is absent) whose output a sigmoid gate scales; the
        # loader requires all of them
        e, ffe = shape.n_expert, shape.expert_ff
        block["ffn_gate_inp.weight"] = w(e, d, gain=4.0)
        block["ffn_gate_exps.weight"] = w(e, ffe, d)
        block["ffn_up_exps.weight"] = w(e, ffe, d)
        block["ffn_down_exps.weight"] = w(e, d, ffe, gain=scale_out)
        block["ffn_gate_inp_shexp.weight"] = w(1, d)[0]
        block["ffn_gate_shexp.weight"] = w(ff, d)
        block["ffn_up_shexp.weight"] = w(ff, d)
        block["ffn_down_shexp.weight"] = w(d, ff, gain=scale_out)
    else:
        block["ffn_gate.weight"] = w(ff, d)
        block["ffn_up.weight"] = w(ff, d)
        block["ffn_down.weight"] = w(d, ff, gain=scale_out)
    if not qwen35_is_recurrent(layer):
        # full attention; the query projection also yields a sigmoid gate per head, hence twice the rows
        block["attn_q.weight"] = w(2 * d, d)
        block["attn_k.weight"] = w(shape.n_head_kv * head_dim, d)
        block["attn_v.weight"] = w(shape.n_head_kv * head_dim, d)
        block["attn_output.weight"] = w(d, d, gain=scale_out)
        block["attn_q_norm.weight"] = np.ones(head_dim, dtype=np.float32)
        block["attn_k_norm.weight"] = np.ones(head_dim, dtype=np.float32)
        return block
    key_dim, value_dim = SSM_STATE * SSM_GROUPS, SSM_STATE * SSM_V_HEADS
    block["attn_qkv.weight"] = w(2 * key_dim + value_dim, d)
    block["attn_gate.weight"] = w(value_dim, d)
    block["ssm_conv1d.weight"] = w(2 * key_dim + value_dim, SSM_CONV_KERNEL)
    block["ssm_dt.bias"] = np.zeros(SSM_V_HEADS, dtype=np.float32)
    # A = -exp(A_log): a decay per value head, so the state forgets at different rates
    block["ssm_a"] = -np.exp(rng.uniform(-1.0, 0.5, SSM_V_HEADS)).astype(np.float32)
    block["ssm_beta.weight"] = w(SSM_V_HEADS, d)
    block["ssm_alpha.weight"] = w(SSM_V_HEADS, d)
    block["ssm_norm.weight"] = np.ones(SSM_STATE, dtype=np.float32)
    block["ssm_out.weight"] = w(d, value_dim, gain=scale_out)
    return block


def _qwen35_mtp_block(shape: ModelShape) -> dict[str, np.ndarray]:
    """Qwen3.5's MTP block: a full-attention block over eh_proj([enorm(embedding) ; hnorm(h)]). Here
    eh_proj passes the embedding through and the block's attention and FFN add nothing, so the head
    predicts the next token from the last one alone."""
    rng = np.random.default_rng(99)
    d = shape.n_embd

    def w(*dims: int, gain: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(dims) * gain / np.sqrt(dims[-1])).astype(np.float32)

    block = _qwen35_block(rng, shape, 0.0, FULL_ATTENTION_INTERVAL - 1, w)  # an attention block, output 0
    eh_proj = np.zeros((d, 2 * d), np.float32)
    eh_proj[:, :d] = np.eye(d, dtype=np.float32)
    block["nextn.eh_proj.weight"] = eh_proj
    block["nextn.enorm.weight"] = np.ones(d, dtype=np.float32)
    block["nextn.hnorm.weight"] = np.ones(d, dtype=np.float32)
    block["nextn.shared_head_norm.weight"] = np.ones(d, dtype=np.float32)
    return block


def _write(
    path: Path,
    spec: PairSpec,
    n_layer: int,
    embd: np.ndarray,
    output: np.ndarray,
    blocks: list[dict[str, np.ndarray]],
    role: str,
    vocab_variant: int = 0,
) -> None:
    import gguf

    vocab, scores, types = build_vocab(vocab_variant, spec.n_vocab, chat=spec.chat_template is not None)
    w = gguf.GGUFWriter(str(path), spec.shape.arch)
    mtp = spec.mtp and role == "target"
    _write_model_keys(w, spec, n_layer, role, mtp, len(vocab))
    write_tokenizer(w, vocab, scores, types, spec.chat_template)
    _write_tensors(w, spec, n_layer, embd, output, blocks, mtp)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _write_model_keys(w: Any, spec: PairSpec, n_layer: int, role: str, mtp: bool, n_vocab: int) -> None:
    """The general and architecture keys, up to the vocabulary size and the file type; the tokenizer's follow."""
    import gguf

    shape = spec.shape
    w.add_name(f"{spec.name}-{role}")
    w.add_context_length(shape.n_ctx_train)
    w.add_embedding_length(shape.n_embd)
    # block_count counts the MTP block, as llama.cpp's converter writes it
    w.add_block_count(n_layer + 1 if mtp else n_layer)
    if mtp:
        w.add_nextn_predict_layers(1)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    if shape.gemma4:
        _write_gemma4_keys(w, shape, n_layer, role)
    else:
        w.add_head_count_kv(shape.n_head_kv)
    if not shape.hybrid and not shape.gemma4:
        w.add_rope_dimension_count(shape.n_embd // shape.n_head)
    w.add_layer_norm_rms_eps(1e-5)
    if shape.sliding_window and not shape.gemma4:
        w.add_sliding_window(shape.sliding_window)
    if shape.hybrid:
        _write_qwen35_keys(w, shape)
    if shape.is_moe:
        w.add_expert_count(shape.n_expert)
        w.add_expert_used_count(shape.n_expert_used)
        w.add_expert_feed_forward_length(shape.expert_ff)
    w.add_vocab_size(n_vocab)
    ftype = {
        "f32": gguf.LlamaFileType.ALL_F32,
        "f16": gguf.LlamaFileType.MOSTLY_F16,
        "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    }[spec.dtype]
    w.add_file_type(int(ftype))


def _write_qwen35_keys(w: Any, shape: ModelShape) -> None:
    """Qwen3.5's rotary sections and delta-net sizes."""
    # a quarter of each head rotates, in llama.cpp's multi-section layout (sections sum to n_rot / 2)
    n_rot = shape.n_embd // shape.n_head // 4
    w.add_rope_dimension_count(n_rot)
    w.add_rope_dimension_sections([n_rot // 2 - 2 * (n_rot // 6), n_rot // 6, n_rot // 6, 0])
    w.add_full_attention_interval(FULL_ATTENTION_INTERVAL)
    w.add_ssm_conv_kernel(SSM_CONV_KERNEL)
    w.add_ssm_inner_size(SSM_STATE * SSM_V_HEADS)
    w.add_ssm_state_size(SSM_STATE)
    w.add_ssm_time_step_rank(SSM_V_HEADS)
    w.add_ssm_group_count(SSM_GROUPS)


def write_tokenizer(
    w: Any, vocab: list[str], scores: list[float], types: list[int], chat_template: str | None = None
) -> None:
    """The synthetic vocabulary's tokenizer keys (a llama SentencePiece layout), for every writer here."""
    w.add_tokenizer_model("llama")
    w.add_token_list(vocab)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)


def _write_tensors(
    w: Any,
    spec: PairSpec,
    n_layer: int,
    embd: np.ndarray,
    output: np.ndarray,
    blocks: list[dict[str, np.ndarray]],
    mtp: bool,
) -> None:
    """The model's tensors: the embeddings and output head, the first n_layer blocks, the MTP block."""
    shape = spec.shape
    _put(w, spec.dtype, "token_embd.weight", embd)
    _put(w, spec.dtype, "output_norm.weight", np.ones(shape.n_embd, dtype=np.float32))
    _put(w, spec.dtype, "output.weight", output)
    if shape.gemma4 and not all(gemma4_is_sliding(il) for il in range(n_layer)):
        # one tensor of frequency factors for every global layer (llama.cpp duplicates it per buffer type);
        # ones rotate as plain RoPE does
        freqs = np.ones(shape.gemma4_attention(GEMMA4_PERIOD - 1)[0] // 2, dtype=np.float32)
        _put(w, spec.dtype, "rope_freqs.weight", freqs)
    for i, block in enumerate(blocks[:n_layer]):
        for key, arr in block.items():
            _put(w, spec.dtype, f"blk.{i}.{key}", arr)
    if mtp:
        for key, arr in _qwen35_mtp_block(shape).items():
            _put(w, spec.dtype, f"blk.{n_layer}.{key}", arr)


def _put(w: Any, dtype: str, name: str, arr: np.ndarray) -> None:
    """One tensor in the pair's dtype (f32 | f16 | q8_0); vectors, and rows q8_0's blocks do not divide, in F32."""
    import gguf

    if name.endswith("ssm_conv1d.weight"):
        w.add_tensor(name, arr.astype(np.float32))  # llama.cpp's conv kernel reads F32 only, as converters keep it
    elif arr.ndim >= 2 and dtype == "f16":
        w.add_tensor(name, arr.astype(np.float16))
    elif arr.ndim >= 2 and dtype == "q8_0" and arr.shape[-1] % 32 == 0:
        q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    else:
        w.add_tensor(name, arr.astype(np.float32))


def _check_gemma4(spec: PairSpec) -> None:
    shape = spec.shape
    if shape.sliding_window <= 0:
        raise ValueError("a gemma4 pair needs a sliding window > 0")
    if spec.draft_layers < 2:
        # llama.cpp's gemma4 cache asks for at least two layers with their own KV cache
        raise ValueError("a gemma4 draft needs at least 2 layers")
    kv_layers = shape.n_layer - shape.shared_kv_layers
    if shape.shared_kv_layers:
        # a shared sliding layer reads layer kv_layers - 2, a shared global one layer kv_layers - 1
        if kv_layers < 2 or not gemma4_is_sliding(kv_layers - 2) or gemma4_is_sliding(kv_layers - 1):
            raise ValueError(
                f"with {shape.shared_kv_layers} shared KV layers, layer {kv_layers - 1} must be global and "
                f"layer {kv_layers - 2} sliding: take n_layer - shared_kv_layers a multiple of {GEMMA4_PERIOD}"
            )
        if spec.draft_layers > kv_layers:
            raise ValueError(f"the draft's layers ({spec.draft_layers}) must all keep a KV cache (at most {kv_layers})")


def write_pair(out_dir: str | Path, spec: PairSpec = PairSpec(), draft_vocab_variant: int = 0) -> tuple[Path, Path]:
    """Write ``target.gguf`` and ``draft.gguf`` into out_dir; return their paths.

    ``draft_vocab_variant`` > 0 gives the draft a vocabulary the target's rejects.
    """
    if not 1 <= spec.draft_layers < spec.shape.n_layer:
        raise ValueError("draft_layers must be at least 1 and fewer than the target's layers")
    if spec.shape.n_embd % spec.shape.n_head or spec.shape.n_head % spec.shape.n_head_kv:
        raise ValueError("n_embd must divide by n_head, and n_head by n_head_kv")
    if spec.shape.hybrid and spec.draft_layers < FULL_ATTENTION_INTERVAL:
        # llama.cpp cannot run a hybrid model whose every layer is recurrent, and neither does anyone
        raise ValueError(f"a hybrid draft needs at least {FULL_ATTENTION_INTERVAL} layers, to hold an attention layer")
    if spec.shape.gemma4:
        _check_gemma4(spec)
    if spec.mtp and not spec.shape.hybrid:
        raise ValueError("an MTP block is written for hybrid (qwen35) pairs only")
    if spec.shape.is_moe and not 1 <= spec.shape.n_expert_used <= spec.shape.n_expert:
        raise ValueError("n_expert_used must be at least 1 and at most n_expert")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(spec.seed)
    pieces = len(build_vocab()[0])  # the word pieces end here; chat tokens and padding follow
    n_vocab, d = max(len(build_vocab(chat=spec.chat_template is not None)[0]), spec.n_vocab), spec.shape.n_embd
    embd = rng.standard_normal((n_vocab, d)).astype(np.float32)
    output = (rng.standard_normal((n_vocab, d)) * 2.0).astype(np.float32)
    # control, byte and unused tokens get logit 0, far below the winners: random text
    # then reads as word pieces and rarely ends early
    output[: 3 + 256] = 0.0
    output[pieces:] = 0.0
    blocks = [
        _block_tensors(rng, spec.shape, 1.0 if i < spec.draft_layers else spec.divergence, i)
        for i in range(spec.shape.n_layer)
    ]
    target, draft = out / "target.gguf", out / "draft.gguf"
    _write(target, spec, spec.shape.n_layer, embd, output, blocks, "target")
    _write(draft, spec, spec.draft_layers, embd, output, blocks, "draft", draft_vocab_variant)
    return target, draft
