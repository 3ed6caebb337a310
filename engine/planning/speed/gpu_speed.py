"""What a pass of llama.cpp's CUDA backend costs on a GPU: the form of the GPU speed model, and its constants as
bench/gpu_prediction.py fitted them to published llama.cpp measurements (resources/catalog/gpu_speed.json).

A pass of one token reads every weight once. Its time is a fixed cost per layer (the kernels a layer launches,
each with a floor of a few microseconds however little it reads) plus the bytes over the share of the card's peak
bandwidth that llama.cpp's vector kernels reach, which differs by kernel family: float weights
(mul_mat_vec_f), legacy block types and K-quants (mul_mat_vec_q, which also decodes the blocks, the K-quants'
at more cost).

A layer of routed experts (an MoE) costs a further fixed time: its router's top-k, gathers and expert-indexed
products are kernels of their own (``moe_layer_ms``, fitted on the published gpt-oss and Qwen3 30B-A3B rows).

A pass of b tokens, as speculation verifies: llama.cpp's vector kernels read each weight once for the whole
batch but decode it and take the dot product again for every token (ggml-cuda/mmvq.cu), so each token beyond
the first costs every weight of the matrix again in arithmetic: ``token_ops`` operations per weight (by family)
at the card's dense FP16 tensor rate, which stands for how fast its arithmetic is. A card with much bandwidth for
its arithmetic (an A100 against an RTX 4090) pays more for each verified token, and a bit-lean type (Q2_K
against Q8_0) more per byte. Tried and judged worse held out (bench/gpu_prediction.py, 2026-12-06, median error
of the verify ratio at b = 2..8, leave one GPU out): the same cost per byte read (19 %), per weight over the
bandwidth (15 %); this form: 10 %, then 7.3 % once cards without a read FP16 figure (the P40, GB10: a guess by
compute capability stands in) were kept out of the fit, since the cost is in units of that figure, and 6.6 %
fitted on the vector kernels' range (b <= 8) alone. Past MMVQ_MAX_BATCH_SIZE (8) quantized weights go to the
tiled MMQ kernel and float weights run the tensor-core MMF kernel from 2 tokens to 16; a cap for the tiled
kernel fitted the few published curves worse, so the line stands for every batch size, past 8 an extrapolation.
A card without tensor cores (Pascal) has no FP16 tensor figure to stand for its arithmetic: its rate is fitted on
such cards' curves (the P40's), since the guess of a later generation put a GTX 1080 Ti's published speculative
run 0.32 faster than measured (0.05 with the fitted rate, 2026-12-07; that row is in no fit).

The constants come from resources/catalog/gpu_speed.json, written by ``bench/gpu_prediction.py --write`` with
the held-out errors that set the bands GPU predictions show (engine.planning.speed.prediction_band).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from engine.core.paths import RESOURCES_DIR
from engine.models.gguf_inspect import GGML_TYPE_IDS, GGML_TYPES
from engine.planning.speed.model_cost import FLOAT_TYPES, ModelCost

GPU_FIT = RESOURCES_DIR / "catalog" / "gpu_speed.json"

# ms to copy one MiB of a hybrid model's recurrent state between the GPU and host memory, as llama.cpp does for a
# speculative checkpoint (engine.planning.speed.cost_model): read, not fitted, from timers put around llama-server's
# checkpoint calls on an RTX 3090 (i9-13900K host; Qwen3.6-35B-A3B's 62.8 MiB state, llama.cpp 3737e4137): 17.34 s
# for 785 copies out and 16.33 s for 728 back, 0.352 and 0.357 ms a MiB, about 3 GB/s (a synchronous copy per
# tensor into pageable memory, far below the PCIe link). https://github.com/thc1006/qwen3.6-speculative-decoding-
# rtx3090 (ERRATA A12). One card and host: a faster link or host may copy faster; nothing published says by how much.
STATE_COPY_MS_PER_MIB = 0.355
FAMILIES = ("float", "legacy", "kquant")
# block types whose dot products mul_mat_vec_q takes straight from int8 (a scale or two per block of 32); the
# K-quants and the importance-matrix types unpack sub-blocks first ("k-quants cost more to decode and mvq redoes
# that per column", ggml-cuda/mmvq.cu)
LEGACY_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "MXFP4")


def family(type_name: str) -> str:
    """The CUDA kernel family a ggml type runs in: "float" (F16, BF16, F32), "legacy" or "kquant"."""
    t = type_name.upper()
    if t in FLOAT_TYPES:
        return "float"
    return "legacy" if t in LEGACY_TYPES else "kquant"


def weights_in(type_name: str, n_bytes: int) -> float:
    """How many weights ``n_bytes`` of a ggml type hold (its blocks' elements over their bytes)."""
    _, block, block_bytes = GGML_TYPES[GGML_TYPE_IDS[type_name.upper()]]
    return n_bytes * block / block_bytes


def matrix_bytes_by_type(cost: ModelCost) -> list[tuple[str, int]]:
    """The matrices' bytes by ggml type (a cost built without types: by its weight classes, F16 for none)."""
    if cost.bytes_by_type:
        return list(cost.bytes_by_type)
    return [(c, b) for c, b, _ in cost.by_class] or [("F16", cost.weight_bytes)]


@dataclass(frozen=True)
class GpuFit:
    """The GPU speed model's constants (module docstring). Shares are of the peak bandwidth; times in ms."""

    efficiency: dict[str, float]  # by family: the share of the peak bandwidth a one-token pass reaches
    layer_ms: float  # each layer's fixed cost in a pass
    # by family: what each token beyond the first costs per weight, in operations at the card's FP16 tensor rate
    token_ops: dict[str, float]
    # by GPU generation: added to 1 / efficiency of the quantized families (Pascal's P100 has no int8 dot product
    # instruction; a T4 is held to 70 W), fitted shrunk toward 0 so that a generation with few rows stays near
    # the common figure
    generation_delta: dict[str, float] = field(default_factory=dict)
    # |held-out error| quantiles the bands use: {"plain": .., "verify": .., "speedup": ..}
    band: dict[str, float] = field(default_factory=dict)
    # the rate in token_ops' units of a card without tensor cores (compute capability below 7: Pascal), fitted on
    # such cards' published curves: mul_mat_vec_q runs on the CUDA cores everywhere, so "FP16 tensor TFLOPs" only
    # stands for a card's arithmetic where it has tensor cores; a Pascal card has no such figure to read
    no_tensor_tflops: float | None = None
    # what a llama.cpp build from before 2025 paid beyond the pinned build's cost, fitted on the dataset's older rows
    # so that they can join the fit: {"layer_ms": more per layer (before CUDA graphs and later kernel work),
    # "inverse_efficiency": added to 1 / efficiency}. Only bench/gpu_prediction.py applies it, to those rows:
    # SpecTune predicts the build it ships.
    old_build: dict[str, float] = field(default_factory=dict)
    source: str = ""
    # what a layer of routed experts costs beyond a dense layer's fixed time: the router's top-k, the gathers and the
    # expert-indexed products are kernels of their own, each with its floor
    moe_layer_ms: float = 0.0

    def inverse_efficiency(self, fam: str, generation: str = "") -> float:
        """1 / the share of the peak bandwidth a family's one-token read reaches on a card of this generation."""
        inv = 1.0 / self.efficiency[fam]
        return inv if fam == "float" else inv + self.generation_delta.get(generation, 0.0)

    def forward_ms(
        self,
        cost: ModelCost,
        batch: int,
        n_past: int,
        bandwidth: float,
        flops: float,
        generation: str = "",
    ) -> float:
        """A pass of ``batch`` tokens at context position ``n_past`` on a card of ``bandwidth`` bytes/s peak and
        ``flops`` dense FP16 (the attention's arithmetic, small at decode), of a generation ("Ada")."""
        ms = (self.layer_ms + (self.moe_layer_ms if cost.expert_share else 0.0)) * cost.n_layers
        matrix_bytes = 0
        for type_name, n_bytes in matrix_bytes_by_type(cost):
            fam = family(type_name)
            ms += 1000.0 * n_bytes * self.inverse_efficiency(fam, generation) / bandwidth
            ops = self.token_ops.get(fam, 0.0) * weights_in(type_name, n_bytes) * max(batch - 1, 0)
            ms += 1000.0 * ops / flops
            matrix_bytes += n_bytes
        # an MoE batch reads the experts its other tokens route to (at the quantized share)
        ms += 1000.0 * cost.extra_expert_bytes(batch) * self.inverse_efficiency("kquant", generation) / bandwidth
        # the KV cache, norms and the rest: read once a pass at the float kernels' share
        rest = cost.bytes_read(n_past) - matrix_bytes
        ms += 1000.0 * rest / (self.efficiency["float"] * bandwidth)
        ms += 1000.0 * 2.0 * batch * cost.attention_macs(n_past) / flops
        return ms

    def to_dict(self) -> dict:
        return {
            "efficiency": self.efficiency,
            "layer_ms": self.layer_ms,
            "token_ops": self.token_ops,
            "generation_delta": self.generation_delta,
            "band": self.band,
            "no_tensor_tflops": self.no_tensor_tflops,
            "old_build": self.old_build,
            "moe_layer_ms": self.moe_layer_ms,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, d: dict) -> GpuFit:
        return cls(
            efficiency={k: float(v) for k, v in d["efficiency"].items()},
            layer_ms=float(d["layer_ms"]),
            token_ops={k: float(v) for k, v in d.get("token_ops", {}).items()},
            generation_delta={k: float(v) for k, v in d.get("generation_delta", {}).items()},
            band={k: float(v) for k, v in d.get("band", {}).items()},
            no_tensor_tflops=None if d.get("no_tensor_tflops") is None else float(d["no_tensor_tflops"]),
            old_build={k: float(v) for k, v in d.get("old_build", {}).items()},
            source=str(d.get("source", "")),
            moe_layer_ms=float(d.get("moe_layer_ms", 0.0)),
        )


@lru_cache(maxsize=2)
def load_fit(path: Path = GPU_FIT) -> GpuFit:
    data = json.loads(path.read_text(encoding="utf-8"))
    return GpuFit.from_dict(data["fit"])
