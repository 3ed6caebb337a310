"""What one token costs a model, read from its GGUF header: the bytes a forward pass reads and the
multiply-adds it does, by weight class (the kernels a CPU runs differ by weight type), with an MoE's routed
share of its experts, a hybrid's recurrent state, sliding-window layers and the fixed cost of each layer it
runs through. engine.planning.speed.device_speed.DeviceSpeed prices these on a device; engine.planning.speed.speed_model
turns the prices into a prediction.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.models.gguf_inspect import GGML_TYPE_IDS, GGML_TYPES, ModelInfo, TensorInfo
from engine.planning.memory.kv_layers import head_dims, layer_heads
from engine.planning.memory.recurrent import RecurrentLayout, is_recurrent, recurrent_layout, trunk_layers
from engine.planning.memory.sliding_window import SlidingWindow, sliding_window

KV_BYTES = 2  # an f16 KV cache, llama.cpp's default

# tables a token reads one row of, whatever their size: Gemma 4 E2B's per-layer embeddings are 2.4B of its
# 4.6B parameters, of which a token reads 35 x 256 values
LOOKUP_TABLES = frozenset({"per_layer_token_embd.weight"})
_LAYER = re.compile(r"^blk\.(\d+)\.")


# On a CPU the kernels differ by weight type: a K-quant is unpacked block by block, Q8_0 and the other
# legacy types take llama.cpp's int8 dot products, F16 its float ones, and within a family the unpacking
# costs differ too (a Q5_0 row unpacks its fifth bit, a Q6_K row two more than a Q4_K one). The probe times
# each of these classes on a file of that type alone; a device that has no figure for a class uses its F16
# (plain) figures.
WEIGHT_CLASSES = ("F16", "Q8_0", "Q5_0", "Q4_K", "Q6_K")
# Tensor types the probe does not time, and the measured class whose per-byte rates and batch table they are
# charged at: the class that runs the same kind of kernel. On x86 with AVX2 llama.cpp repacks Q4_0 and
# IQ4_NL as it repacks Q4_K (engine.planning.memory.memory_plan: CPU_REPACK), and their batches run its tiled
# kernels; the other K-quants and the importance-matrix types unpack block by block, as Q6_K does; the
# other legacy types take the int8 dot products of Q5_0 and Q8_0. Not measured, so a prediction that counts
# any says so (ModelCost.borrowed) and its band is widened (engine.planning.speed.prediction_band).
# bench/borrowed_classes.py times each against its stand-in: the first run (2026-12-03, a mapping by family
# alone) charged Q4_0 as Q8_0 (a 5-token pass predicted 3.6x what it took) and Q3_K and IQ4_XS as Q4_K (both
# 55-59 % too fast), which is why repacking and unpacking decide the stand-in now.
BORROWED_CLASSES = {
    "Q4_0": "Q4_K",  # repacked
    "IQ4_NL": "Q4_K",  # repacked
    "Q4_1": "Q5_0",  # legacy blocks of 32, int8 dot products
    "Q5_1": "Q5_0",
    "Q8_1": "Q8_0",
    "Q2_K": "Q6_K",  # K-quants unpacked block by block
    "Q3_K": "Q6_K",
    "Q5_K": "Q6_K",
    "Q8_K": "Q6_K",
}
FLOAT_TYPES = ("F16", "BF16", "F32", "F64")


def weight_class(type_name: str) -> str:
    """The kernel class a tensor type is charged at: a measured class (WEIGHT_CLASSES), or for a type the
    probe does not time the class of its kernel (BORROWED_CLASSES; the other importance-matrix and the
    ternary types unpack block by block and are charged as Q6_K)."""
    t = type_name.upper()
    if t in FLOAT_TYPES:
        return "F16"
    if t in WEIGHT_CLASSES:
        return t
    return BORROWED_CLASSES.get(t, "Q6_K")


def is_borrowed(type_name: str) -> bool:
    """A matrix type whose speed the probe did not measure (weight_class borrows another's)."""
    t = type_name.upper()
    return t not in FLOAT_TYPES and t not in WEIGHT_CLASSES


@dataclass(frozen=True)
class ModelCost:
    """What one token costs a model, from its GGUF header."""

    weight_bytes: int  # read once per forward pass
    weight_macs: int  # multiply-adds per token in the matrix products
    kv_bytes_per_position: int  # K and V of one context position, all layers
    attention_macs_per_position: int  # per token, for each position it attends to
    # the matrix products' (bytes, multiply-adds) by weight class (weight_class); the rest of
    # weight_bytes (norms, an untied embedding's row) is small and counted at the plain figures
    by_class: tuple[tuple[str, int, int], ...] = ()
    # MoE: the share of the experts one token routes to (n_expert_used / n_expert), and all the experts'
    # bytes by weight class. The figures above count one token's share; a batch of B tokens reads every
    # expert any of them routes to, 1 - (1 - share)^B of them for independent picks
    expert_share: float = 0.0
    expert_bytes_by_class: tuple[tuple[str, int], ...] = ()
    # hybrid: the recurrent state, read and written once per pass (2 x its bytes), and the multiply-adds
    # per token of updating it and reading it out
    state_bytes_per_pass: int = 0
    recurrent_macs: int = 0
    # sliding-window layers read and attend to at most swa_window positions (kv_bytes_per_position and
    # attention_macs_per_position count the full-attention layers only)
    swa_kv_bytes_per_position: int = 0
    swa_attention_macs_per_position: int = 0
    swa_window: int = 0
    # a hybrid target verifies a partly kept draft again (engine.planning.speed.cost_model, replays)
    replays: bool = False
    # a hybrid model's recurrent state of one sequence (every recurrent layer's r and s rows): what llama.cpp
    # copies out of the device before a step it may have to undo, and back after (cost_model's checkpoints)
    checkpoint_bytes: int = 0
    # a draft that attends over the target's KV cache and keeps none (a Gemma 4 assistant): the verified
    # tokens need no pass of their own through it, so a step costs K draft passes and the verify alone
    reads_target_cache: bool = False
    # a target's own MTP block drafting for it (draft-mtp): a hybrid target then rolls a rejected draft
    # back from its K state snapshots, in place, instead of verifying again
    mtp: bool = False
    # matrix types counted at another class's rates (is_borrowed), with their share of the matrix bytes
    borrowed: tuple[tuple[str, float], ...] = ()
    # the output layer's bytes (the tied embedding where there is no output.weight): a narrow model with a
    # large vocabulary reads mostly this, and runs slower than its bytes say (engine.planning.speed.prediction_band)
    output_bytes: int = 0
    # the layers a pass runs through (those with a tensor counted here): each costs a CPU a fixed time beyond
    # its bytes (DeviceSpeed.layer_ms)
    n_layers: int = 0
    # by_class counts a type the probe does not time at its stand-in's bytes per weight (weight_class):
    # this much more than the matrices hold, which bytes_read does not count
    charged_extra_bytes: int = 0
    # the matrix rows a pass runs through by weight class (one token's share of an MoE's experts; the output
    # layer's included): a CPU kernel pays a fixed time for each row beyond its bytes (DeviceSpeed.row_ns),
    # so a narrow model, or a large vocabulary's output layer, runs slower per byte than a wide one
    rows_by_class: tuple[tuple[str, int], ...] = ()
    # the matrix products' bytes by ggml type as the file holds them (one token's share of an MoE's experts), and
    # the output layer's type: a GPU's kernels are picked by type (engine.planning.speed.gpu_speed), not by CPU class
    bytes_by_type: tuple[tuple[str, int], ...] = ()
    output_type: str = ""

    @property
    def rows(self) -> int:
        return sum(n for _, n in self.rows_by_class)

    @property
    def output_heavy(self) -> bool:
        """The output layer is over half of what a token reads (Gemma 3 270M: 73 %)."""
        return self.weight_bytes > 0 and self.output_bytes > 0.5 * self.weight_bytes

    def attended(self, n_past: int) -> tuple[int, int]:
        """(full-attention positions, sliding-window positions) a token attends to after n_past."""
        return n_past, min(n_past, self.swa_window) if self.swa_window else n_past

    def experts_touched(self, batch: int) -> float:
        """The share of the experts a pass of ``batch`` tokens reads (0 for a dense model)."""
        return 1.0 - (1.0 - self.expert_share) ** max(batch, 1) if self.expert_share else 0.0

    def extra_expert_bytes(self, batch: int, cls: str | None = None) -> float:
        """Expert bytes a batch reads beyond one token's share: why verifying costs an MoE more."""
        if not self.expert_share or batch <= 1:
            return 0.0
        more = self.experts_touched(batch) - self.expert_share
        return sum(n * more for c, n in self.expert_bytes_by_class if cls is None or c == cls)

    def bytes_read(self, n_past: int, batch: int = 1) -> float:
        full, swa = self.attended(n_past)
        kv = self.kv_bytes_per_position * full + self.swa_kv_bytes_per_position * swa
        return self.weight_bytes + kv + self.state_bytes_per_pass + self.extra_expert_bytes(batch)

    def attention_macs(self, n_past: int) -> float:
        """Multiply-adds per token of attention (and of a hybrid's state) after n_past positions."""
        full, swa = self.attended(n_past)
        return (
            self.attention_macs_per_position * full + self.swa_attention_macs_per_position * swa + self.recurrent_macs
        )

    def positional_macs(self, n_past: int) -> float:
        """The part of attention_macs that grows with the context (not a hybrid's state update): what a CPU
        runs at its attention rate (DeviceSpeed.attention_flops_per_s)."""
        return self.attention_macs(n_past) - self.recurrent_macs

    def flops(self, batch: int, n_past: int) -> float:
        return 2.0 * batch * (self.weight_macs + self.attention_macs(n_past))


def model_cost(info: ModelInfo, only: Callable[[str], bool] | None = None, mtp: bool = False) -> ModelCost:
    """Bytes and multiply-adds per token of a model (dense or MoE), from its tensors and hyperparameters.

    only: count just the tensors whose names it accepts, and no KV cache or attention (the part of a
    model that runs elsewhere, e.g. the experts --n-cpu-moe keeps in host memory; see split_cost).
    mtp: the cost of a pass of the model's MTP (next-n) block instead, as draft-mtp runs it (mtp_cost)."""
    n_expert = info._arch_int("expert_count") or 0
    n_expert_used = info._arch_int("expert_used_count") or n_expert
    w = _count_weights(info, only, mtp, n_expert, n_expert_used)
    layout = None if mtp else recurrent_layout(info)
    state = layout.state_bytes() if layout and only is None else 0
    window = sliding_window(info)
    kv, att = _attention_per_position(info, layout, window, mtp) if only is None else ([0, 0], [0, 0])
    return ModelCost(
        weight_bytes=w.weight_bytes,
        weight_macs=w.weight_macs,
        kv_bytes_per_position=kv[0],
        attention_macs_per_position=att[0],
        swa_kv_bytes_per_position=kv[1],
        swa_attention_macs_per_position=att[1],
        swa_window=window.window if window else 0,
        replays=layout is not None and layout.n_recurrent > 0,
        checkpoint_bytes=state,
        reads_target_cache=info.architecture == "gemma4-assistant",  # its speculative_role, without a scan
        mtp=mtp,
        by_class=tuple((c, b, m) for c, (b, m) in sorted(w.classes.items())),
        expert_share=n_expert_used / n_expert if n_expert and w.experts else 0.0,
        expert_bytes_by_class=tuple(sorted(w.experts.items())),
        state_bytes_per_pass=2 * state,
        recurrent_macs=3 * layout.n_recurrent * layout.n_embd_s if layout and only is None else 0,
        borrowed=tuple(
            (t, round(n / max(sum(b for b, _ in w.classes.values()), 1), 4)) for t, n in sorted(w.borrowed.items())
        ),
        output_bytes=0 if mtp else w.output_bytes,
        n_layers=len(w.layers_run),
        charged_extra_bytes=w.charged_extra,
        rows_by_class=tuple(sorted((c, int(n)) for c, n in w.rows.items())),
        bytes_by_type=tuple(sorted(w.types.items())),
        output_type="" if mtp else w.output_type,
    )


@dataclass
class _Weights:
    """model_cost's tally of the tensors a pass reads, one token's share of each (the routed experts')."""

    weight_bytes: int = 0
    weight_macs: int = 0
    classes: dict[str, list[int]] = field(default_factory=dict)  # weight class -> [bytes charged, multiply-adds]
    borrowed: dict[str, int] = field(default_factory=dict)  # a type the probe does not time -> its bytes
    experts: dict[str, int] = field(default_factory=dict)  # weight class -> all the experts' bytes
    output_bytes: int = 0
    charged_extra: int = 0
    layers_run: set[int] = field(default_factory=set)
    rows: dict[str, float] = field(default_factory=dict)  # weight class -> matrix rows a token's pass runs
    types: dict[str, int] = field(default_factory=dict)  # ggml type -> bytes held (one token's share)
    output_type: str = ""

    def add_matrix(self, t: TensorInfo, share: float) -> None:
        """A matrix product's multiply-adds and the bytes its weight class is charged for."""
        self.weight_macs += int(t.n_elements * share)
        cls = weight_class(t.type_name)
        c = self.classes.setdefault(cls, [0, 0])
        held = charged = int(t.n_bytes * share)
        if is_borrowed(t.type_name):
            self.borrowed[t.type_name.upper()] = self.borrowed.get(t.type_name.upper(), 0) + held
            # a stand-in's time per weight, not per byte: the unpacking, not the reading, sets a quantized
            # kernel's pace on a CPU (bench/borrowed_classes.py: Q3_K and IQ4_XS charged per byte at Q6_K's
            # rate were predicted 40-49 % too fast)
            charged = int(t.n_elements * share * bytes_per_weight(cls))
            self.charged_extra += charged - held
        c[0] += charged
        c[1] += int(t.n_elements * share)
        self.types[t.type_name.upper()] = self.types.get(t.type_name.upper(), 0) + held
        # ggml's shape puts the row length first: every further dimension counts rows
        self.rows[cls] = self.rows.get(cls, 0.0) + t.n_elements / max(t.shape[0], 1) * share


def _count_weights(
    info: ModelInfo, only: Callable[[str], bool] | None, mtp: bool, n_expert: int, n_expert_used: int
) -> _Weights:
    """The weights a pass reads (model_cost's only and mtp choose the pass)."""
    tied = not any(t.name == "output.weight" for t in info.tensors)
    n_trunk = trunk_layers(info)
    # the logits of an MTP pass come from the model's output head unless its block has its own
    head = None if any(".nextn.shared_head_head" in t.name for t in info.tensors) else "output.weight"
    if head and tied:
        head = "token_embd.weight"
    w = _Weights()
    for t in info.tensors:
        if only is not None and not only(t.name):
            continue
        layer = _LAYER.match(t.name)
        in_block = layer is not None and int(layer.group(1)) >= n_trunk
        if mtp and (layer is None and t.name not in (head, "output_norm.weight") or ".nextn.embed_tokens" in t.name):
            continue  # an MTP pass: its block and the output head; the block's own embedding is a lookup
        if mtp != in_block and layer is not None:
            continue  # the MTP block is run by draft-mtp's own context, not by a pass of the model
        if layer is not None:
            w.layers_run.add(int(layer.group(1)))
        share = 1.0
        if "_exps" in t.name and n_expert:
            share = n_expert_used / n_expert  # only the routed experts are read and multiplied
            cls = weight_class(t.type_name)
            w.experts[cls] = w.experts.get(cls, 0) + t.n_bytes
        if (t.name == "token_embd.weight" and not tied) or t.name in LOOKUP_TABLES:
            continue  # a lookup of one row per token, not a matrix product
        if t.name == ("token_embd.weight" if tied else "output.weight"):
            w.output_bytes += t.n_bytes
            w.output_type = t.type_name.upper()
        w.weight_bytes += int(t.n_bytes * share)
        if len(t.shape) >= 2:
            w.add_matrix(t, share)
    return w


def _attention_per_position(
    info: ModelInfo, layout: RecurrentLayout | None, window: SlidingWindow | None, mtp: bool
) -> tuple[list[int], list[int]]:
    """(KV bytes, attention multiply-adds) of one context position, each as [full attention, sliding window],
    over the layers a pass attends with (the MTP block's alone for mtp)."""
    # per attention layer: its heads and head sizes (Gemma 4's global layers differ from its sliding ones);
    # a layer that reuses an earlier layer's cache still reads it
    n_trunk = trunk_layers(info)
    kv, att = [0, 0], [0, 0]  # [full attention, sliding window]
    for il in range(n_trunk, info.block_count or 0) if mtp else range(n_trunk):
        if is_recurrent(layout, il):
            continue
        n_head, n_head_kv = layer_heads(info, il)
        dim_k, dim_v = head_dims(info, il, window)
        slides = int(window is not None and il < len(window.layers) and window.layers[il])
        kv[slides] += n_head_kv * (dim_k + dim_v) * KV_BYTES
        att[slides] += n_head * (dim_k + dim_v)
    return kv, att


def bytes_per_weight(type_name: str) -> float:
    """What one weight of a ggml type takes, in bytes (Q4_K: 144 bytes per 256 weights)."""
    _, block, size = GGML_TYPES[GGML_TYPE_IDS[type_name.upper()]]
    return size / block


def mtp_cost(info: ModelInfo) -> ModelCost | None:
    """What a draft-mtp pass costs: the model's MTP (next-n) block after its trunk and the output head over
    the vocabulary, attending to the context like one more layer; None for a model without the block. llama.cpp
    runs it like a draft model (common/speculative.cpp, draft-mtp): K passes to draft K tokens, and one pass
    over each verified batch to catch its cache up."""
    if trunk_layers(info) >= (info.block_count or 0):
        return None
    return model_cost(info, mtp=True)


def split_cost(info: ModelInfo, on_host: Callable[[str], bool]) -> tuple[ModelCost, ModelCost]:
    """(the part on the GPU, the part in host memory) of a model some of whose tensors stay on the CPU;
    the KV cache and attention count on the GPU side, where the layers are, and so does a hybrid's recurrent
    state that speculation copies (checkpoint_bytes)."""
    gpu = model_cost(info, lambda name: not on_host(name))
    layout = recurrent_layout(info)  # model_cost counts the state only where it counts every tensor
    state = layout.state_bytes() if layout else 0
    return dataclasses.replace(gpu, checkpoint_bytes=state), model_cost(info, on_host)
