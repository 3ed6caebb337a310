"""Speed-check models in seconds: llama-shaped target/draft pairs in F16 or Q4_K_M for bench/gpu_check.py.

    python bench/gpu_models.py OUT_DIR --n-embd 4096 --n-layer 32 --n-head 32 --n-head-kv 8 --n-ff 14336 \
        [--quant f16|q4_k_m] [--draft-layers 2] [--divergence 0.05] [--n-vocab 0]

engine.models.synthetic draws every weight of a model from a normal distribution in float32, in memory:
for a pair shaped like Llama-3.1-8B that took 253 s and some 40 GB on the H200 machine, most of the GPU
check's time. A speed check needs the right shapes, byte counts and quant types, and random-looking values
of the right scale; it does not need every weight drawn afresh. Here each matrix is cut from a pool of
random values (4 Mi float16 normals, or 128 Ki random Q4_K / Q6_K blocks whose scales give the same spread)
at an offset of its own, the pool repeating along the matrix, and written straight to the file one tensor at
a time: bounded memory, and about as fast as the disk takes it.

The pair keeps engine.models.synthetic's recipe: the same vocabulary and tokenizer keys, the draft is the
target's first ``draft_layers`` blocks (the same bytes), the target's later blocks write back into the
residual stream scaled by ``divergence`` (so the draft predicts the target as often as that allows), and the
output layer gives control, byte and padding tokens logit 0. Q4_K_M follows llama.cpp's mix for the llama
architecture: Q4_K everywhere, Q6_K for the output layer and for attn_v and ffn_down in the layers
llama-quantize gives more bits (its use_more_bits: the first and last eighth, and every third between).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.models.synthetic import ModelShape, PairSpec, _write_model_keys, build_vocab, write_tokenizer  # noqa: E402
from engine.models.tensor_layout import tensor_layout  # noqa: E402

POOL_VALUES = 1 << 22  # float16 values in the F16 pool (8 MiB)
POOL_BLOCKS = 1 << 17  # blocks in each K-quant pool
QK = 256  # values per Q4_K / Q6_K block
Q4_K_BYTES, Q6_K_BYTES = 144, 210
# the spread of a block's values per unit of its d, for uniformly random bytes (module docstring): Q4_K's
# d*sc*q - dmin*m with dmin = 7.5 d (mean 0) and Q6_K's d*scale*(q - 32)
Q4_K_SPREAD, Q6_K_SPREAD = 258.0, 1369.0
OUTPUT_PROJECTIONS = ("attn_output.weight", "ffn_down.weight")


def use_more_bits(layer: int, n_layer: int) -> bool:
    """llama-quantize's rule for the layers whose attn_v and ffn_down get Q6_K in Q4_K_M."""
    return layer < n_layer // 8 or layer >= 7 * n_layer // 8 or (layer - n_layer // 8) % 3 == 2


def _offset(name: str, modulo: int) -> int:
    """Where a tensor starts in its pool: from its name, so the draft's copy of a target block is identical."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little") % modulo


class Pools:
    def __init__(self, seed: int):
        rng = np.random.default_rng(seed)
        self.normal = rng.standard_normal(POOL_VALUES, dtype=np.float32)
        self.q4 = rng.integers(0, 256, (POOL_BLOCKS, Q4_K_BYTES), dtype=np.uint8)
        self.q6 = rng.integers(0, 256, (POOL_BLOCKS, Q6_K_BYTES), dtype=np.uint8)
        self._f16: dict[float, np.ndarray] = {}

    def f16(self, name: str, rows: int, cols: int, gain: float) -> np.ndarray:
        pool = self._f16.get(gain)
        if pool is None:
            pool = self._f16[gain] = (self.normal * gain).astype(np.float16)
        return np.resize(np.roll(pool, -_offset(name, POOL_VALUES)), rows * cols).reshape(rows, cols)

    def kquant(self, kind: str, name: str, rows: int, cols: int, gain: float) -> np.ndarray:
        """rows x cols values as K-quant blocks (bytes, rows x blocks*size), d set for this gain."""
        pool, size, spread, d_at = (
            (self.q4, Q4_K_BYTES, Q4_K_SPREAD, 0) if kind == "q4_k" else (self.q6, Q6_K_BYTES, Q6_K_SPREAD, 208)
        )
        n_blocks = rows * cols // QK
        blocks = np.resize(np.roll(pool, -_offset(name, POOL_BLOCKS), axis=0), (n_blocks, size)).copy()
        d = np.float16(gain / spread)
        blocks[:, d_at : d_at + 2] = np.frombuffer(d.tobytes(), dtype=np.uint8)
        if kind == "q4_k":
            blocks[:, 2:4] = np.frombuffer(np.float16(7.5 * float(d)).tobytes(), dtype=np.uint8)
        return blocks.reshape(rows, cols // QK * size)


def _tensor_type(quant: str, name: str, layer: int, n_layer: int, row: int) -> str:
    if quant == "f16" or row % QK:
        return "f16"
    if name == "output.weight":
        return "q6_k"
    if name.endswith(("attn_v.weight", "ffn_down.weight")) and use_more_bits(layer, n_layer):
        return "q6_k"
    return "q4_k"


def _write(path: Path, spec: PairSpec, quant: str, n_layer: int, pools: Pools, role: str) -> None:
    import gguf

    shape = spec.shape
    vocab, scores, types = build_vocab(0, spec.n_vocab)
    pieces = len(build_vocab()[0])
    numbers = shape.numbers(n_layer=n_layer, n_vocab=len(vocab))
    w = gguf.GGUFWriter(str(path), shape.arch)
    _write_model_keys(w, spec, n_layer, role, False, len(vocab))
    if quant == "q4_k_m":  # the file type says what the tensors are (the f16 key was written above)
        del w.kv_data[0][gguf.Keys.General.FILE_TYPE]
        w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_K_M))
    write_tokenizer(w, vocab, scores, types)
    plans = []
    for t in tensor_layout(numbers):
        rows, row = (t.shape[1], t.shape[0]) if len(t.shape) == 2 else (1, t.shape[0])
        if not t.matrix or len(t.shape) != 2:
            plans.append((t.name, "f32", rows, row, 1.0))
            continue
        key = t.name.split(".", 2)[-1] if t.layer >= 0 else t.name
        gain = 1.0 / np.sqrt(row)
        if t.name == "token_embd.weight":
            gain = 1.0
        elif t.name == "output.weight":
            gain = 2.0
        elif key in OUTPUT_PROJECTIONS and t.layer >= spec.draft_layers:
            gain *= spec.divergence
        plans.append((t.name, _tensor_type(quant, t.name, t.layer, shape.n_layer, row), rows, row, float(gain)))
    raw = {"f16": None, "q4_k": gguf.GGMLQuantizationType.Q4_K, "q6_k": gguf.GGMLQuantizationType.Q6_K}
    for name, kind, rows, row, _ in plans:
        if kind == "f32":
            w.add_tensor_info(name, (row,), np.dtype(np.float32), row * 4)
        elif kind == "f16":
            w.add_tensor_info(name, (rows, row), np.dtype(np.float16), rows * row * 2)
        else:
            size = Q4_K_BYTES if kind == "q4_k" else Q6_K_BYTES
            w.add_tensor_info(name, (rows, row // QK * size), np.dtype(np.uint8), rows * row // QK * size, raw[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, kind, rows, row, gain in plans:
        if kind == "f32":
            data = np.ones(row, dtype=np.float32)
        elif kind == "f16":
            data = pools.f16(name, rows, row, gain)
        else:
            data = pools.kquant(kind, name, rows, row, gain)
        if name == "output.weight":  # control, byte and padding tokens: logit 0, far below the word pieces
            data = data.copy()
            data[: 3 + 256] = 0
            data[pieces:] = 0
        w.write_tensor_data(data)
    w.close()


def write_fast_pair(out_dir: Path, spec: PairSpec, quant: str = "f16") -> tuple[Path, Path]:
    """target.gguf and draft.gguf in out_dir (see the module docstring); quant: f16 or q4_k_m."""
    if quant not in ("f16", "q4_k_m"):
        raise ValueError(f"quant must be f16 or q4_k_m, not {quant}")
    if spec.shape.hybrid or spec.shape.gemma4 or spec.shape.is_moe:
        raise ValueError("the fast writer writes dense llama-style pairs only")
    out_dir.mkdir(parents=True, exist_ok=True)
    pools = Pools(spec.seed)
    target, draft = out_dir / "target.gguf", out_dir / "draft.gguf"
    _write(target, spec, quant, spec.shape.n_layer, pools, "target")
    _write(draft, spec, quant, spec.draft_layers, pools, "draft")
    return target, draft


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path)
    for name, default in (("n-embd", 256), ("n-layer", 4), ("n-head", 4), ("n-head-kv", 2), ("n-ff", 768)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--quant", choices=("f16", "q4_k_m"), default="f16")
    ap.add_argument("--draft-layers", type=int, default=2)
    ap.add_argument("--divergence", type=float, default=0.05)
    ap.add_argument("--n-vocab", type=int, default=0, help="pad the vocabulary to this size (0: the pieces only)")
    a = ap.parse_args()
    shape = ModelShape(n_embd=a.n_embd, n_layer=a.n_layer, n_head=a.n_head, n_head_kv=a.n_head_kv, n_ff=a.n_ff)
    spec = PairSpec(shape, a.draft_layers, a.divergence, dtype="f16", name="gpu-check", n_vocab=a.n_vocab)
    t0 = time.monotonic()
    target, draft = write_fast_pair(a.out_dir, spec, a.quant)
    print(json.dumps({"target": str(target), "draft": str(draft), "seconds": round(time.monotonic() - t0, 2)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
