"""Small generated draft heads, for tests of draft-mtp, draft-eagle3, draft-dflash and draft-dspark.

All share engine.models.synthetic's vocabulary, so each passes llama.cpp's vocabulary rule with the
synthetic targets, and each loads in the pinned llama.cpp (the layouts follow src/models/*.cpp there).

``write_mtp_model``: a glm4moe model (GLM-4.5's architecture, one of those the pinned llama.cpp runs
draft-mtp for: engine.models.draft_heads.MTP_ARCHITECTURES) with one next-n (MTP) block after its
trunk, laid out as llama.cpp's converter writes it: ``glm4moe.block_count`` counts the MTP block,
``glm4moe.nextn_predict_layers`` = 1, and the block's ``blk.N.nextn.*`` tensors sit beside the usual
attention and MoE tensors of block N. Its acceptance is controllable: the trunk's blocks add
``divergence`` times their output to the residual stream, so at divergence 0 the target predicts from
the last token alone (a bigram model: output(norm(embd[t]))). The MTP head projects the embedding of the
token it is given straight through (eh_proj = [I | 0] over [enorm(embd) ; hnorm(h)]), adds nothing in
its own attention and experts, and reads out through the same output matrix: it predicts exactly that
bigram, so draft-mtp is accepted every time at divergence 0, and less often as the trunk's share grows.

``write_eagle3_draft``: an EAGLE-3 draft (general.architecture "eagle3": one decoder block over
[norm(embedding) ; norm(fc(three target layers))], ``eagle3.target_layers`` and
``eagle3.target_hidden_size``), with random weights: it drafts, and is rarely right.

``write_dflash_draft``: a DFlash draft (general.architecture "dflash": fc over the target layers, one
block with Q/K norms, ``tokenizer.ggml.mask_token_id`` for the masked block); ``dspark=True`` adds the
DSpark Markov head (markov_w1 / markov_w2), which makes llama.cpp pick draft-dspark for it.

``write_gemma4_assistant``: Gemma 4's separate draft file (general.architecture "gemma4-assistant"), for a
given gemma4 target (engine.models.synthetic ``--gemma4``). Its layers compute queries only and read the
target's KV cache (its sliding layer the target's layer n_layer - 2, its global layer n_layer - 1), so
their head sizes and KV heads are the target's; ``embedding_length_out`` carries the target's hidden size.
llama-server runs it as ``-md assistant.gguf --spec-type draft-mtp``. Its acceptance is the target's: the
pre-projection passes the target's (scaled) embedding of the token it is given through and drops the
hidden state, its blocks add nothing (zero post-norms), and its output matrix begins with the target's, so
it predicts the target's bigram, output(norm(embd[t])). A generated gemma4 target departs from that bigram by
its active layers (``--draft-layers``, at full strength) and the rest (``--divergence``), so those set the
acceptance: measured at temperature 0, K 3, 64 tokens, 45 of 54 drafts accepted with ``--draft-layers 2
--divergence 0``, 38 of 72 with ``--divergence 0`` (6 active layers), a fifth to a third with the defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from engine.models.synthetic import ModelShape, build_vocab, write_tokenizer

MTP_ARCH = "glm4moe"
SYNTHETIC_TARGET = ModelShape()  # engine.models.synthetic's default target, which the heads draft for


# the glm4moe trunk's shape: a leading dense block (n_ff wide), then routed ones of n_expert experts
MTP_TRUNK = ModelShape(n_embd=64, n_layer=2, n_ff=128, n_expert=4, n_expert_used=2, n_ff_exp=64)


@dataclasses.dataclass(frozen=True)
class MTPModelSpec:
    shape: ModelShape = MTP_TRUNK  # n_layer counts the trunk's blocks; the MTP block comes after them
    divergence: float = 0.0
    seed: int = 7
    name: str = "spectune-synthetic-mtp"


def _w(rng: np.random.Generator, *shape: int, gain: float = 1.0) -> np.ndarray:
    """A weight in numpy's (rows = outputs) order, scaled by 1/sqrt(inputs)."""
    return (rng.standard_normal(shape) * gain / np.sqrt(shape[-1])).astype(np.float32)


def _ones(n: int) -> np.ndarray:
    return np.ones(n, np.float32)


def _writer(path: Path, arch: str, name: str, n_ctx_train: int, n_embd: int, n_layer: int, n_ff: int, heads: tuple):
    """A GGUFWriter with the keys every file here shares: shape, F32, the synthetic vocabulary."""
    import gguf

    tokens, scores, types = build_vocab()
    n_head, n_head_kv = heads
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    write_tokenizer(w, tokens, scores, types)
    return w


def _finish(w: Any, tensors: dict[str, np.ndarray]) -> None:
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# -- an MTP head -----------------------------------------------------------------------------------


def _glm_block(rng: np.random.Generator, s: ModelShape, dense: bool, scale_out: float) -> dict[str, np.ndarray]:
    d, hd = s.n_embd, s.n_embd // s.n_head
    t = {
        "attn_norm.weight": _ones(d),
        "attn_q.weight": _w(rng, s.n_head * hd, d),
        "attn_k.weight": _w(rng, s.n_head_kv * hd, d),
        "attn_v.weight": _w(rng, s.n_head_kv * hd, d),
        "attn_output.weight": _w(rng, d, s.n_head * hd, gain=scale_out),
        "post_attention_norm.weight": _ones(d),
    }
    if dense:
        t["ffn_gate.weight"] = _w(rng, s.n_ff, d)
        t["ffn_up.weight"] = _w(rng, s.n_ff, d)
        t["ffn_down.weight"] = _w(rng, d, s.n_ff, gain=scale_out)
        return t
    e, ff = s.n_expert, s.n_ff_exp
    t["ffn_gate_inp.weight"] = _w(rng, e, d)
    t["exp_probs_b.bias"] = np.zeros(e, np.float32)
    t["ffn_gate_exps.weight"] = _w(rng, e, ff, d)
    t["ffn_up_exps.weight"] = _w(rng, e, ff, d)
    t["ffn_down_exps.weight"] = _w(rng, e, d, ff, gain=scale_out)
    # one shared expert: GLM-4.5's MTP graph adds its output unconditionally
    t["ffn_gate_shexp.weight"] = _w(rng, ff, d)
    t["ffn_up_shexp.weight"] = _w(rng, ff, d)
    t["ffn_down_shexp.weight"] = _w(rng, d, ff, gain=scale_out)
    return t


def write_mtp_model(path: str | Path, spec: MTPModelSpec = MTPModelSpec()) -> Path:
    """Write one glm4moe GGUF with an MTP block to ``path`` (F32); return the path."""
    import gguf

    s = spec.shape
    if s.n_embd % s.n_head or s.n_head % s.n_head_kv:
        raise ValueError("n_embd must divide by n_head, and n_head by n_head_kv")
    if s.n_layer < 2:
        raise ValueError("the trunk needs a dense block and at least one MoE block (n_layer >= 2)")
    path = Path(path)
    rng = np.random.default_rng(spec.seed)
    n_vocab, d = len(build_vocab()[0]), s.n_embd
    output = (rng.standard_normal((n_vocab, d)) * 2.0).astype(np.float32)
    output[: 3 + 256] = 0.0  # control and byte tokens never win: the text reads as word pieces
    heads = (s.n_head, s.n_head_kv)
    # block_count counts the MTP block, as convert_hf_to_gguf.py does
    w = _writer(path, MTP_ARCH, spec.name, s.n_ctx_train, d, s.n_layer + 1, s.n_ff, heads)
    w.add_uint32(f"{MTP_ARCH}.nextn_predict_layers", 1)
    w.add_expert_feed_forward_length(s.n_ff_exp)
    w.add_expert_count(s.n_expert)
    w.add_expert_used_count(s.n_expert_used)
    w.add_expert_shared_count(1)
    w.add_leading_dense_block_count(1)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)  # what GLM-4.5 uses

    tensors = {
        "token_embd.weight": rng.standard_normal((n_vocab, d)).astype(np.float32),
        "output_norm.weight": _ones(d),
        "output.weight": output,
    }
    for i in range(s.n_layer):
        for key, arr in _glm_block(rng, s, dense=i == 0, scale_out=spec.divergence).items():
            tensors[f"blk.{i}.{key}"] = arr
    mtp = s.n_layer
    # the MTP block's own attention and experts add nothing (scale 0): its prediction is the bigram's
    for key, arr in _glm_block(rng, s, dense=False, scale_out=0.0).items():
        tensors[f"blk.{mtp}.{key}"] = arr
    eh_proj = np.zeros((d, 2 * d), np.float32)
    eh_proj[:, :d] = np.eye(d, dtype=np.float32)  # [enorm(embedding) ; hnorm(h)] -> the embedding half
    tensors[f"blk.{mtp}.nextn.eh_proj.weight"] = eh_proj
    tensors[f"blk.{mtp}.nextn.enorm.weight"] = _ones(d)
    tensors[f"blk.{mtp}.nextn.hnorm.weight"] = _ones(d)
    tensors[f"blk.{mtp}.nextn.shared_head_norm.weight"] = _ones(d)
    _finish(w, tensors)
    return path


# -- EAGLE-3 and DFlash draft files ------------------------------------------------------------------


def _target_layers(target: ModelShape) -> list[int]:
    """Three layers to read, low / middle / high, as EAGLE-3 and DFlash training picks them."""
    n = target.n_layer
    return [1, n // 2, n - 1]


def write_eagle3_draft(path: str | Path, target: ModelShape = SYNTHETIC_TARGET, seed: int = 11) -> Path:
    """An EAGLE-3 draft for a synthetic target of this shape (engine.models.synthetic), random weights."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    n_vocab, d, ff = len(build_vocab()[0]), target.n_embd, target.n_ff
    q, kv = d, target.n_head_kv * (d // target.n_head)
    w = _writer(
        path, "eagle3", "spectune-synthetic-eagle3", target.n_ctx_train, d, 1, ff, (target.n_head, target.n_head_kv)
    )
    w.add_array("eagle3.target_layers", _target_layers(target))
    w.add_uint32("eagle3.target_hidden_size", d)
    # no token_embd: the decoder reads the target's, as EAGLE-3 drafts for Llama 3.1 8B do
    _finish(
        w,
        {
            "fc.weight": _w(rng, d, 3 * d),
            "output_norm.weight": _ones(d),
            "output.weight": _w(rng, n_vocab, d),
            "blk.0.attn_norm.weight": _ones(d),
            "blk.0.attn_norm_2.weight": _ones(d),
            # attention reads [norm(embedding) ; norm(g)]: twice the width
            "blk.0.attn_q.weight": _w(rng, q, 2 * d),
            "blk.0.attn_k.weight": _w(rng, kv, 2 * d),
            "blk.0.attn_v.weight": _w(rng, kv, 2 * d),
            "blk.0.attn_output.weight": _w(rng, d, q),
            "blk.0.ffn_norm.weight": _ones(d),
            "blk.0.ffn_gate.weight": _w(rng, ff, d),
            "blk.0.ffn_up.weight": _w(rng, ff, d),
            "blk.0.ffn_down.weight": _w(rng, d, ff),
        },
    )
    return path


def write_dflash_draft(
    path: str | Path, target: ModelShape = SYNTHETIC_TARGET, dspark: bool = False, seed: int = 13, block_size: int = 4
) -> Path:
    """A DFlash draft (with ``dspark``, a DSpark one) for a synthetic target of this shape, random weights."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    n_vocab, d, ff = len(build_vocab()[0]), target.n_embd, target.n_ff
    hd = d // target.n_head
    name = "spectune-synthetic-" + ("dspark" if dspark else "dflash")
    w = _writer(path, "dflash", name, target.n_ctx_train, d, 1, ff, (target.n_head, target.n_head_kv))
    w.add_array("dflash.target_layers", _target_layers(target))
    w.add_uint32("dflash.block_size", block_size)
    w.add_mask_token_id(0)  # the masked positions of a block; without one llama.cpp aborts
    tensors = {
        "fc.weight": _w(rng, d, 3 * d),
        "enc.output_norm.weight": _ones(d),
        "output_norm.weight": _ones(d),
        "output.weight": _w(rng, n_vocab, d),
        "token_embd.weight": _w(rng, n_vocab, d),
        "blk.0.attn_norm.weight": _ones(d),
        "blk.0.attn_q.weight": _w(rng, target.n_head * hd, d),
        "blk.0.attn_k.weight": _w(rng, target.n_head_kv * hd, d),
        "blk.0.attn_v.weight": _w(rng, target.n_head_kv * hd, d),
        "blk.0.attn_output.weight": _w(rng, d, target.n_head * hd),
        "blk.0.attn_q_norm.weight": _ones(hd),
        "blk.0.attn_k_norm.weight": _ones(hd),
        "blk.0.ffn_norm.weight": _ones(d),
        "blk.0.ffn_gate.weight": _w(rng, ff, d),
        "blk.0.ffn_up.weight": _w(rng, ff, d),
        "blk.0.ffn_down.weight": _w(rng, d, ff),
    }
    if dspark:
        rank = 16
        tensors["markov_w1.weight"] = _w(rng, n_vocab, rank)
        tensors["markov_w2.weight"] = _w(rng, n_vocab, rank)
    _finish(w, tensors)
    return path


# -- a Gemma 4 assistant ----------------------------------------------------------------------------

ASSISTANT_ARCH = "gemma4-assistant"


def _read_target(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A gemma4 GGUF's metadata (plain values) and the two tensors an assistant copies, as F32."""
    import gguf

    r = gguf.GGUFReader(str(path))
    meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    if meta.get("general.architecture") != "gemma4":
        raise ValueError(f"{path} is not a gemma4 model (general.architecture {meta.get('general.architecture')!r})")
    tensors = {}
    for t in r.tensors:
        if t.name in ("token_embd.weight", "output.weight"):
            arr = gguf.quants.dequantize(t.data, t.tensor_type)
            tensors[t.name] = np.asarray(arr, np.float32).reshape(int(t.shape[1]), int(t.shape[0]))
    tensors.setdefault("output.weight", tensors["token_embd.weight"])  # a tied output head
    return meta, tensors


def write_gemma4_assistant(path: str | Path, target_path: str | Path, seed: int = 17) -> Path:
    """A gemma4-assistant draft file for the gemma4 GGUF at ``target_path`` (F32); return the path."""
    path, target_path = Path(path), Path(target_path)
    meta, tgt = _read_target(target_path)
    shape = _assistant_shape(meta, tgt)
    w = _assistant_writer(path, meta, shape)
    _finish(w, _assistant_tensors(np.random.default_rng(seed), tgt, shape))
    return path


@dataclasses.dataclass(frozen=True)
class _AssistantShape:
    """A gemma4 assistant's numbers, from its target's: two layers, one sliding reading the target's layer
    n_layer - 2 and one global reading n_layer - 1, with those layers' head sizes and KV heads."""

    d_tgt: int  # the target's width, which the assistant's projections map from and to
    d: int  # the assistant's own width; llama.cpp requires it to differ from the target's
    n_head: int
    kv_heads: list[int]  # the sliding layer's, the global layer's
    dim_global: int
    dim_swa: int
    ff: int
    n_vocab: int
    pattern: tuple[bool, ...] = (True, False)  # sliding, then global

    @property
    def dims(self) -> list[int]:
        return [self.dim_swa, self.dim_global]


def _assistant_shape(meta: dict[str, Any], tgt: dict[str, np.ndarray]) -> _AssistantShape:
    """The assistant's numbers from its target's metadata; a ValueError for a target it cannot draft for."""
    a = "gemma4."
    n_layer_tgt = int(meta[a + "block_count"])
    swa_pattern = list(meta[a + "attention.sliding_window_pattern"])
    if n_layer_tgt < 2 or not swa_pattern[n_layer_tgt - 2] or swa_pattern[n_layer_tgt - 1]:
        raise ValueError("the target's last layer must be global and the one before it sliding")
    kv_heads = meta[a + "attention.head_count_kv"]
    kv_heads = list(kv_heads) if isinstance(kv_heads, list) else [int(kv_heads)] * n_layer_tgt
    d_tgt = int(meta[a + "embedding_length"])
    d = 2 * d_tgt
    n_head = int(meta[a + "attention.head_count"])
    dim_global, dim_swa = int(meta[a + "attention.key_length"]), int(meta[a + "attention.key_length_swa"])
    kv = [kv_heads[n_layer_tgt - 2], kv_heads[n_layer_tgt - 1]]
    return _AssistantShape(d_tgt, d, n_head, kv, dim_global, dim_swa, 2 * d, tgt["token_embd.weight"].shape[0])


def _assistant_writer(path: Path, meta: dict[str, Any], s: _AssistantShape) -> Any:
    """A GGUFWriter with the assistant's keys and its target's vocabulary."""
    import gguf

    a = "gemma4."
    pattern = list(s.pattern)
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), ASSISTANT_ARCH)
    w.add_name("spectune-synthetic-gemma4-assistant")
    w.add_context_length(int(meta[a + "context_length"]))
    w.add_embedding_length(s.d)
    w.add_embedding_length_out(s.d_tgt)
    w.add_block_count(len(pattern))
    w.add_nextn_predict_layers(len(pattern))  # every layer is a draft layer: there is no trunk
    w.add_feed_forward_length(s.ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.kv_heads)
    w.add_key_length(s.dim_global)
    w.add_value_length(s.dim_global)
    w.add_key_length_swa(s.dim_swa)
    w.add_value_length_swa(s.dim_swa)
    w.add_rope_dimension_count(int(meta.get(a + "rope.dimension_count", s.dim_global)))
    w.add_rope_dimension_count_swa(int(meta.get(a + "rope.dimension_count_swa", s.dim_swa)))
    w.add_rope_freq_base(float(meta.get(a + "rope.freq_base", 10_000.0)))
    w.add_rope_freq_base_swa(float(meta.get(a + "rope.freq_base_swa", 10_000.0)))
    w.add_sliding_window(int(meta[a + "attention.sliding_window"]))
    w.add_sliding_window_pattern(pattern)
    w.add_layer_norm_rms_eps(float(meta[a + "attention.layer_norm_rms_epsilon"]))
    w.add_vocab_size(s.n_vocab)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    # the target's vocabulary, as it is
    w.add_tokenizer_model(meta["tokenizer.ggml.model"])
    w.add_token_list(meta["tokenizer.ggml.tokens"])
    w.add_token_scores(meta["tokenizer.ggml.scores"])
    w.add_token_types(meta["tokenizer.ggml.token_type"])
    for key, add in (
        ("tokenizer.ggml.bos_token_id", w.add_bos_token_id),
        ("tokenizer.ggml.eos_token_id", w.add_eos_token_id),
        ("tokenizer.ggml.unknown_token_id", w.add_unk_token_id),
        ("tokenizer.ggml.add_bos_token", w.add_add_bos_token),
        ("tokenizer.ggml.add_eos_token", w.add_add_eos_token),
        ("tokenizer.chat_template", w.add_chat_template),
    ):
        if key in meta:
            add(meta[key])
    return w


def _assistant_tensors(
    rng: np.random.Generator, tgt: dict[str, np.ndarray], s: _AssistantShape
) -> dict[str, np.ndarray]:
    """The assistant's tensors: they pass the target's embedding of the token through to the target's output
    matrix, and its blocks run but add nothing."""
    d, d_tgt = s.d, s.d_tgt
    # the token embedding doubles as the output matrix: its first d_tgt columns are the target's output,
    # the rest never meet a nonzero activation
    embd = np.concatenate([tgt["output.weight"], _w(rng, s.n_vocab, d - d_tgt)], axis=1)
    pre = np.zeros((d, 2 * d_tgt), np.float32)  # [scaled target embedding ; target hidden state] -> [x ; 0]
    pre[:d_tgt, :d_tgt] = np.eye(d_tgt, dtype=np.float32)
    post = np.zeros((d_tgt, d), np.float32)
    post[:, :d_tgt] = np.eye(d_tgt, dtype=np.float32)
    tensors = {
        "token_embd.weight": embd.astype(np.float32),
        "output_norm.weight": _ones(d),
        "nextn.pre_projection.weight": pre,
        "nextn.post_projection.weight": post,
        "rope_freqs.weight": _ones(s.dim_global // 2),
    }
    zeros = np.zeros(d, np.float32)
    for i, hd in enumerate(s.dims):
        # attention and FFN run, and their zero post-norms keep them out of the residual stream
        blk = {
            "attn_norm.weight": _ones(d),
            "attn_q.weight": _w(rng, s.n_head * hd, d),
            "attn_output.weight": _w(rng, d, s.n_head * hd),
            "attn_q_norm.weight": _ones(hd),
            "post_attention_norm.weight": zeros,
            "layer_output_scale.weight": _ones(1),
            "ffn_norm.weight": _ones(d),
            "ffn_gate.weight": _w(rng, s.ff, d),
            "ffn_up.weight": _w(rng, s.ff, d),
            "ffn_down.weight": _w(rng, d, s.ff),
            "post_ffw_norm.weight": zeros,
        }
        for key, arr in blk.items():
            tensors[f"blk.{i}.{key}"] = arr
    return tensors


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testmodels.heads", description=__doc__.splitlines()[0])
    p.add_argument("kind", choices=("mtp", "eagle3", "dflash", "dspark", "gemma4-assistant"))
    p.add_argument("out", help="the GGUF file to write")
    p.add_argument("--target", help="gemma4-assistant: the gemma4 target GGUF it drafts for")
    p.add_argument("--divergence", type=float, default=MTPModelSpec.divergence, help="mtp: the trunk's share")
    a = p.parse_args(argv)
    if a.kind == "gemma4-assistant":
        if not a.target:
            p.error("gemma4-assistant needs --target, the gemma4 GGUF it drafts for")
        try:
            path = write_gemma4_assistant(a.out, a.target)
        except (ValueError, KeyError, OSError) as exc:
            p.error(f"--target {a.target}: {exc}")
    elif a.kind == "mtp":
        path = write_mtp_model(a.out, MTPModelSpec(divergence=a.divergence))
    elif a.kind == "eagle3":
        path = write_eagle3_draft(a.out)
    else:
        path = write_dflash_draft(a.out, dspark=a.kind == "dspark")
    json.dump({"kind": a.kind, "path": str(path)}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
