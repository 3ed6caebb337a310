"""How fast a pair will run here, before it runs: a roofline on what the GGUF says a token costs.

One forward pass of B tokens on one device, with n_past tokens already in the KV cache:

    t(B) = overhead + max(bytes read / bandwidth, B x FLOPs per token / compute)

bytes read: the weights a pass touches, once per pass whatever B is (the token embedding is one row
per token; an MoE layer reads only its active experts, n_expert_used of n_expert), plus the KV cache
up to n_past (a sliding-window layer's only up to its window: gpt-oss attends over 128 positions in half
its layers, Gemma 3 over 1024 in five of six). FLOPs per token: 2 per weight multiplied, plus attention
over the positions each layer attends to. A CPU prices this otherwise (DeviceSpeed): one token reads,
a batch adds what the CPU probe timed per multiply-add at that batch size, and each layer has a fixed cost.
A hybrid model (Qwen3.5: engine.planning.recurrent) has KV caches in its attention layers only; each
of its delta-net layers instead reads its fixed-size recurrent state at the start of a pass and writes
it back at the end, whatever n_past is, and updates it for every token (about three multiply-adds per
state element: decay and write the key-value outer product, read it out with the query). An MTP block
after the trunk is not part of a forward pass of the model.
Plain decoding is t(1) per token; a speculative step with K drafted tokens costs K draft passes, a
draft pass over the K + 1 verified tokens (none for a Gemma 4 assistant, which keeps no cache of its
own) and one target pass of K + 1 (engine.planning.cost_model; a hybrid target adds the replay of a
partly kept draft),
which is why verify cost that grows with B (compute-bound, as on a 2-core CPU) eats the speedup and
a flat one (bandwidth-bound, as on a GPU) does not.

Until this pair has been measured on this machine the prediction rests on priors: the device's
speed (NVML and a table for GPUs; a measured probe for the CPU) and an acceptance per workload.
A tune of the pair (kept in the history) replaces both with what it measured; ``basis`` says which.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from engine.core.paths import RESOURCES_DIR
from engine.models.gguf_inspect import GGML_TYPE_IDS, GGML_TYPES, ModelInfo
from engine.planning.cost_model import CostCurve, PairCosts
from engine.planning.kv_layers import head_dims, layer_heads
from engine.planning.prediction_band import Band, band_for
from engine.planning.recurrent import is_recurrent, recurrent_layout, trunk_layers
from engine.planning.sliding_window import sliding_window

KV_BYTES = 2  # an f16 KV cache, llama.cpp's default
# acceptance of a same-family draft before anything is measured, per draft position: the one prior every
# prediction of text of no known kind starts from (the recommender lowers it for a coarse draft quant). Its
# level: with it, Leviathan et al.'s formula gives the 1.71x llama.cpp measured for Llama 3.1 8B Q8_0 drafted
# by 3.2 1B Q8_0 (llama.cpp issue 5877 reports 0.72 accepted there).
ACCEPTANCE_PRIOR = 0.70
# the same prior by the kind of text (the shipped workload sets), measured on a real same-family pair
# (Qwen2.5-Coder 1.5B Instruct drafted by the 0.5B, draft-simple K=4, greedy) by bench/acceptance_priors.py,
# in chat mode (an instruct model's default) and as raw text; the file says where each number comes from.
# Text that restates its prompt is drafted more easily than free writing; a tune of the pair replaces any of
# these with what it measured.
ACCEPTANCE_PRIORS_FILE = RESOURCES_DIR / "catalog" / "acceptance_priors.json"


def _load_priors() -> tuple[dict[str, float], dict[str, float], str]:
    doc = json.loads(ACCEPTANCE_PRIORS_FILE.read_text(encoding="utf-8"))
    sets = doc["sets"]
    return (
        {name: float(v["chat"]) for name, v in sets.items()},
        {name: float(v["raw"]) for name, v in sets.items()},
        str(doc["source"]),
    )


ACCEPTANCE_PRIORS, ACCEPTANCE_PRIORS_RAW, ACCEPTANCE_PRIORS_SOURCE = _load_priors()


def acceptance_prior(workload: str | None = None, chat: bool = True) -> float:
    """The prior acceptance per draft position for a shipped workload set, as chat requests (``chat``) or raw
    text; the flat prior for any other text."""
    return (ACCEPTANCE_PRIORS if chat else ACCEPTANCE_PRIORS_RAW).get(workload or "", ACCEPTANCE_PRIOR)


def acceptance_prior_text(workload: str | None = None, chat: bool = True) -> str:
    """Where a prior is shown: "0.70 per position (prior: ...)", saying it is one and where it comes from."""
    where = (
        f"the {workload} set on a real Qwen2.5-Coder pair"
        if workload in ACCEPTANCE_PRIORS
        else "a same-family draft, from Llama 3.1 8B / 3.2 1B"
    )
    return f"{acceptance_prior(workload, chat):.2f} per position (prior: {where}, until the pair is measured)"


BATCH_SIZES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)
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
# IQ4_NL as it repacks Q4_K (engine.planning.memory_plan: CPU_REPACK), and their batches run its tiled
# kernels; the other K-quants and the importance-matrix types unpack block by block, as Q6_K does; the
# other legacy types take the int8 dot products of Q5_0 and Q8_0. Not measured, so a prediction that counts
# any says so (ModelCost.borrowed) and its band is widened (engine.planning.prediction_band).
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
    # a hybrid target verifies a partly kept draft again (engine.planning.cost_model, replays)
    replays: bool = False
    # a draft that attends over the target's KV cache and keeps none (a Gemma 4 assistant): the verified
    # tokens need no pass of their own through it, so a step costs K draft passes and the verify alone
    reads_target_cache: bool = False
    # a target's own MTP block drafting for it (draft-mtp): a hybrid target then rolls a rejected draft
    # back from its K state snapshots, in place, instead of verifying again
    mtp: bool = False
    # matrix types counted at another class's rates (is_borrowed), with their share of the matrix bytes
    borrowed: tuple[tuple[str, float], ...] = ()
    # the output layer's bytes (the tied embedding where there is no output.weight): a narrow model with a
    # large vocabulary reads mostly this, and runs slower than its bytes say (engine.planning.prediction_band)
    output_bytes: int = 0
    # the layers a pass runs through (those with a tensor counted here): each costs a CPU a fixed time beyond
    # its bytes (DeviceSpeed.layer_ms)
    n_layers: int = 0
    # by_class counts a type the probe does not time at its stand-in's bytes per weight (weight_class):
    # this much more than the matrices hold, which bytes_read does not count
    charged_extra_bytes: int = 0

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

    def flops(self, batch: int, n_past: int) -> float:
        return 2.0 * batch * (self.weight_macs + self.attention_macs(n_past))


def model_cost(info: ModelInfo, only: Callable[[str], bool] | None = None, mtp: bool = False) -> ModelCost:
    """Bytes and multiply-adds per token of a model (dense or MoE), from its tensors and hyperparameters.

    only: count just the tensors whose names it accepts, and no KV cache or attention (the part of a
    model that runs elsewhere, e.g. the experts --n-cpu-moe keeps in host memory; see split_cost).
    mtp: the cost of a pass of the model's MTP (next-n) block instead, as draft-mtp runs it (mtp_cost)."""
    n_expert = info._arch_int("expert_count") or 0
    n_expert_used = info._arch_int("expert_used_count") or n_expert
    tied = not any(t.name == "output.weight" for t in info.tensors)
    n_trunk = trunk_layers(info)
    # the logits of an MTP pass come from the model's output head unless its block has its own
    head = None if any(".nextn.shared_head_head" in t.name for t in info.tensors) else "output.weight"
    if head and tied:
        head = "token_embd.weight"
    weight_bytes = weight_macs = 0
    classes: dict[str, list[int]] = {}
    borrowed: dict[str, int] = {}
    experts: dict[str, int] = {}
    output_bytes = 0
    charged_extra = 0
    layers_run: set[int] = set()
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
            layers_run.add(int(layer.group(1)))
        share = 1.0
        if "_exps" in t.name and n_expert:
            share = n_expert_used / n_expert  # only the routed experts are read and multiplied
            cls = weight_class(t.type_name)
            experts[cls] = experts.get(cls, 0) + t.n_bytes
        if (t.name == "token_embd.weight" and not tied) or t.name in LOOKUP_TABLES:
            continue  # a lookup of one row per token, not a matrix product
        if t.name == ("token_embd.weight" if tied else "output.weight"):
            output_bytes += t.n_bytes
        weight_bytes += int(t.n_bytes * share)
        if len(t.shape) >= 2:
            weight_macs += int(t.n_elements * share)
            cls = weight_class(t.type_name)
            c = classes.setdefault(cls, [0, 0])
            held = charged = int(t.n_bytes * share)
            if is_borrowed(t.type_name):
                borrowed[t.type_name.upper()] = borrowed.get(t.type_name.upper(), 0) + held
                # a stand-in's time per weight, not per byte: the unpacking, not the reading, sets a quantized
                # kernel's pace on a CPU (bench/borrowed_classes.py: Q3_K and IQ4_XS charged per byte at Q6_K's
                # rate were predicted 40-49 % too fast)
                charged = int(t.n_elements * share * bytes_per_weight(cls))
                charged_extra += charged - held
            c[0] += charged
            c[1] += int(t.n_elements * share)
    layout = None if mtp else recurrent_layout(info)
    state = layout.state_bytes() if layout and only is None else 0
    window = sliding_window(info)
    # per attention layer: its heads and head sizes (Gemma 4's global layers differ from its sliding ones);
    # a layer that reuses an earlier layer's cache still reads it
    kv, att = [0, 0], [0, 0]  # [full attention, sliding window]
    layers = range(n_trunk, info.block_count or 0) if mtp else range(n_trunk)
    for il in layers if only is None else ():
        if is_recurrent(layout, il):
            continue
        n_head, n_head_kv = layer_heads(info, il)
        dim_k, dim_v = head_dims(info, il, window)
        slides = int(window is not None and il < len(window.layers) and window.layers[il])
        kv[slides] += n_head_kv * (dim_k + dim_v) * KV_BYTES
        att[slides] += n_head * (dim_k + dim_v)
    return ModelCost(
        weight_bytes=weight_bytes,
        weight_macs=weight_macs,
        kv_bytes_per_position=kv[0],
        attention_macs_per_position=att[0],
        swa_kv_bytes_per_position=kv[1],
        swa_attention_macs_per_position=att[1],
        swa_window=window.window if window else 0,
        replays=layout is not None and layout.n_recurrent > 0,
        reads_target_cache=info.architecture == "gemma4-assistant",  # its speculative_role, without a scan
        mtp=mtp,
        by_class=tuple((c, b, m) for c, (b, m) in sorted(classes.items())),
        expert_share=n_expert_used / n_expert if n_expert and experts else 0.0,
        expert_bytes_by_class=tuple(sorted(experts.items())),
        state_bytes_per_pass=2 * state,
        recurrent_macs=3 * layout.n_recurrent * layout.n_embd_s if layout and only is None else 0,
        borrowed=tuple(
            (t, round(n / max(sum(b for b, _ in classes.values()), 1), 4)) for t, n in sorted(borrowed.items())
        ),
        output_bytes=0 if mtp else output_bytes,
        n_layers=len(layers_run),
        charged_extra_bytes=charged_extra,
    )


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
    the KV cache and attention count on the GPU side, where the layers are."""
    return model_cost(info, lambda name: not on_host(name)), model_cost(info, on_host)


@dataclass(frozen=True)
class DeviceSpeed:
    """What a device sustains for llama.cpp's forward passes.

    A GPU (overlap True) reads the weights while it computes: a pass takes the longer of the two, so a
    batch costs what one token does until compute catches up (a roofline). llama.cpp's CPU kernels
    (overlap False) hide the arithmetic of one token's matrix-vector products behind reading the
    weights, but not that of a batch: a pass of one token costs reading the weights, and a pass of B
    tokens from two on costs reading them, plus a share of them read again (``reread``: the
    multi-token kernels walk the weights in other blocks than the one-token path), plus B times the
    compute of one token. Measured on a 2-core x86-64 VM: a 1.4B Q8_0 model took 87 ms for one
    token, 137 for two and 459-522 for sixteen; a line through 2 to 16 tokens meets zero at about 90 ms,
    one token's pass alone. That line is the fallback: a probed CPU prices a batch by its class's table
    (``batch_extra``), what each batch size cost beyond one token per multiply-add, since the kernels'
    tiles make a token in a small batch dearer than one in a large batch; and each layer of a pass
    costs ``layer_ms`` beyond its bytes."""

    name: str
    bandwidth_bytes_per_s: float
    flops_per_s: float
    overhead_ms: float = 0.0
    source: str = ""  # where the figures come from: "NVML + table", "measured probe", ...
    # (bandwidth, FLOPs, reread) by weight class where they were measured apart (the CPU probe); the
    # plain figures stand for F16 and for any class not here
    class_rates: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    overlap: bool = True
    reread: float = 0.0  # the plain figures' share of weights read again by a multi-token pass
    assumed: bool = False  # guessed (an unmeasured CPU), not measured or looked up
    # What a pass of B tokens costs beyond a pass of one, by weight class, in ms per billion multiply-adds of
    # one token: ((B, ms), ...) from B = 2, as the CPU probe timed it at each batch size speculation verifies.
    # Not a line: llama.cpp's multi-token kernels work in tiles of rows, and on the 2-core VM a token beyond
    # the first cost a Q4_K model 16-18 ms per GMAC in passes of 2 to 6 tokens but 9-12 in passes of 12 to
    # 16, so a line through 2..16 charged the small verify batches about half of what they took. Where the
    # device has tables they replace the line (flops, reread), a class without one taking F16's; between and
    # beyond the timed sizes a table is interpolated and extended along its last step.
    batch_extra: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    # what each layer of a pass costs beyond its bytes (ggml runs a layer as a dozen operations, each with a
    # hand-off between the threads): a narrow model with many layers runs slower per byte than a wide one
    layer_ms: float = 0.0

    def rates(self, cls: str) -> tuple[float, float, float]:
        return self.class_rates.get(cls, (self.bandwidth_bytes_per_s, self.flops_per_s, self.reread))

    def extra_per_gmac(self, cls: str, batch: int) -> float | None:
        """ms per billion multiply-adds that a pass of ``batch`` tokens adds to a pass of one, from the class's
        table (F16's for a class without one); None without tables."""
        curve = self._batch_curves.get(cls) or self._batch_curves.get("F16")
        return curve.at(batch) if curve is not None else None

    @cached_property
    def _batch_curves(self) -> dict[str, CostCurve]:
        """The batch tables as curves from one token (0 ms) on, built once: forward_ms asks for them in
        every prediction of every pair a ranking looks at."""
        return {
            cls: CostCurve((1, *(b for b, _ in table)), (0.0, *(ms for _, ms in table)))
            for cls, table in self.batch_extra.items()
            if table
        }

    def forward_ms(self, cost: ModelCost, batch: int, n_past: int) -> float:
        groups = list(cost.by_class) or [("F16", cost.weight_bytes, cost.weight_macs)]
        if self.overlap and not self.class_rates:
            memory_s = cost.bytes_read(n_past, batch) / self.bandwidth_bytes_per_s
            compute_s = cost.flops(batch, n_past) / self.flops_per_s
            return self.overhead_ms + 1000.0 * max(memory_s, compute_s)
        if batch >= 2 and not self.overlap and self.batch_extra:
            return self.forward_ms(cost, 1, n_past) + self._batch_extra_ms(cost, groups, batch, n_past)
        seconds = 0.0
        matrix_bytes = 0
        for cls, n_bytes, macs in groups:  # each class's products run one after another
            bandwidth, flops, reread = self.rates(cls)
            read = n_bytes + cost.extra_expert_bytes(batch, cls)
            seconds += self._pass(read / bandwidth, 2.0 * batch * macs / flops, reread, batch)
            matrix_bytes += n_bytes
        rest_bytes = cost.bytes_read(n_past) - matrix_bytes + cost.charged_extra_bytes  # KV cache, small tensors
        attention = 2.0 * batch * cost.attention_macs(n_past)
        seconds += self._pass(rest_bytes / self.bandwidth_bytes_per_s, attention / self.flops_per_s, 0.0, batch)
        return self.overhead_ms + self.layer_ms * cost.n_layers + 1000.0 * seconds

    def _batch_extra_ms(self, cost: ModelCost, groups: list[tuple[str, int, int]], batch: int, n_past: int) -> float:
        """What B tokens cost a CPU beyond one: each class's matrix products by its table, the experts the other
        tokens route to (read at the class's bandwidth), and each further token's attention."""
        ms = 0.0
        for cls, _, macs in groups:
            per_gmac = self.extra_per_gmac(cls, batch) or 0.0
            ms += macs / 1e9 * per_gmac + 1000.0 * cost.extra_expert_bytes(batch, cls) / self.rates(cls)[0]
        return ms + 1000.0 * (batch - 1) * 2.0 * cost.attention_macs(n_past) / self.flops_per_s

    def _pass(self, memory_s: float, compute_s: float, reread: float, batch: int) -> float:
        if self.overlap:
            return max(memory_s, compute_s)
        if batch <= 1:
            return memory_s  # a matrix-vector product waits on memory
        return memory_s * (1.0 + reread) + compute_s

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "bandwidth_gb_s": round(self.bandwidth_bytes_per_s / 1e9, 2),
            "tflops": round(self.flops_per_s / 1e12, 3),
            "overhead_ms": round(self.overhead_ms, 3),
            "source": self.source,
            "overlap": self.overlap,
            "layer_ms": round(self.layer_ms, 4),
            "batch_extra_ms_per_gmac": {c: {str(b): round(ms, 3) for b, ms in t} for c, t in self.batch_extra.items()},
            "by_class": {
                c: {"bandwidth_gb_s": round(bw / 1e9, 2), "gflops": round(fl / 1e9, 1), "reread": round(r, 3)}
                for c, (bw, fl, r) in self.class_rates.items()
            },
        }


@dataclass
class Measured:
    """This pair measured on this machine (a tune in the history): forward times by batch size and the
    acceptance by draft position."""

    verify_ms: dict[int, float]
    draft_ms: dict[int, float] | None
    acceptance_by_position: list[float] = field(default_factory=list)  # conditional, per position
    source: str = ""


@dataclass
class Prediction:
    plain_tokens_per_s: float
    verify_ms_by_batch: dict[int, float]
    draft_ms: float | None  # one draft token
    speedup_by_k: dict[int, float]
    best_k: int | None  # None: no K beats plain decoding
    acceptance: list[float]  # conditional acceptance by position used
    basis: str  # "measured" or "prior"
    device: DeviceSpeed | None
    method: str = "draft-simple"  # the drafting the speedups are for: draft-mtp for an MTP block or an assistant
    # how far the figures may be off (engine.planning.prediction_band); None: nothing held out checks them
    band: Band | None = None

    @property
    def pays(self) -> bool:
        return self.best_k is not None

    def _closest_k(self) -> int:
        by_k = self.speedup_by_k
        return self.best_k or max(by_k, key=lambda k: by_k[k])

    @property
    def verdict(self) -> str:
        """ "pays", "does not pay", or "may not pay" where the best speedup lies within the band of x1.00 (the
        figures cannot tell it from no speculation); "" without a draft."""
        if not self.speedup_by_k:
            return ""
        best = self.speedup_by_k[self._closest_k()]
        if self.band is not None and abs(best - 1.0) <= self.band.speedup:
            return "may not pay"
        return "pays" if self.pays else "does not pay"

    def unchecked_text(self) -> str:
        """What stands in for a band where no held-out case checked the figures."""
        if self.band is not None:
            return ""
        if self.device is not None and self.device.assumed:
            return "rough: this CPU is not measured yet"
        return "not yet checked on this kind of device"

    def speed_text(self) -> str:
        """ "~14 tok/s ±15 % (x1.32 at K=4)" at the best K, or "~14 tok/s ±15 % without the draft (x0.81 with
        it)" where no K pays (the K whose speedup comes closest to 1); a speedup within the band of x1.00
        says "may not pay". Without a band the figure says it is unchecked."""
        by_k = self.speedup_by_k
        plain = self.plain_tokens_per_s
        band = f" {self.band.plain_text()}" if self.band is not None else ""
        unchecked = f" ({self.unchecked_text()})" if self.band is None else ""
        if not by_k:
            return f"~{tokens_per_s_text(plain)} tok/s{band}{unchecked}"
        k = self._closest_k()
        doubt = f", may not pay: ±{self.band.speedup:.2f}" if self.verdict == "may not pay" and self.band else ""
        if self.pays:
            return f"~{tokens_per_s_text(plain * by_k[k])} tok/s{band} (x{by_k[k]:.2f} at K={k}{doubt}){unchecked}"
        return f"~{tokens_per_s_text(plain)} tok/s{band} without the draft (x{by_k[k]:.2f} with it{doubt}){unchecked}"

    def why(self) -> str:
        """One sentence: why speculation pays here, or why it does not (or may not: within the band)."""
        v1, k = self.verify_ms_by_batch[1], self.best_k or 4
        ratio = self.verify_ms_by_batch.get(k + 1, v1) / v1 if v1 else 1.0
        base = f"verifying {k + 1} tokens costs {ratio:.1f}x one token"
        if self.draft_ms is not None and v1:
            base += f" and a draft token {self.draft_ms / v1:.0%} of a target step"
        band = f" ±{self.band.speedup:.2f}" if self.band is not None else ""
        if self.verdict == "may not pay":
            closest = self._closest_k()
            return (
                f"speculation may not pay here: {base}, so K={closest} gives x{self.speedup_by_k[closest]:.2f}{band}, "
                f"within the prediction's band of x1.00 ({self.basis})"
            )
        if self.pays:
            return f"speculation pays here: {base}, so K={k} gives x{self.speedup_by_k[k]:.2f}{band} ({self.basis})"
        return f"speculation does not pay here: {base} ({self.basis}); run without it"

    def to_dict(self) -> dict:
        return {
            "plain_tokens_per_s": round(self.plain_tokens_per_s, 3),
            "verify_ms_by_batch": {str(b): round(ms, 4) for b, ms in self.verify_ms_by_batch.items()},
            "draft_ms": None if self.draft_ms is None else round(self.draft_ms, 4),
            "speedup_by_k": {str(k): round(s, 4) for k, s in self.speedup_by_k.items()},
            "best_k": self.best_k,
            "acceptance": [round(a, 4) for a in self.acceptance],
            "basis": self.basis,
            "method": self.method,
            "device": self.device.to_dict() if self.device else None,
            "band": None
            if self.band is None
            else {"plain": self.band.plain, "speedup": self.band.speedup, "source": self.band.source},
            "verdict": self.verdict,
            "why": self.why(),
        }


def tokens_per_s_text(x: float) -> str:
    """Tokens/s to two significant figures: 1.2, 14, 140."""
    return f"{x:.1f}" if x < 10 else f"{x:.0f}"


def predict(
    target: ModelCost,
    draft: ModelCost | None,
    device: DeviceSpeed | None,
    *,
    n_past: int = 512,
    acceptance: float | Sequence[float] | None = None,
    measured: Measured | None = None,
    k_max: int = 12,
    host: DeviceSpeed | None = None,
    target_on_host: ModelCost | None = None,
    draft_on_host: bool = False,
    workload: str | None = None,
) -> Prediction:
    """Plain tokens/s and the speedup of draft-simple at each K. ``measured`` (this pair on this machine)
    replaces the device's roofline and the acceptance prior; ``acceptance`` (one chance for every position,
    or one per position) replaces either, so the cost side can be checked on its own.

    A pair placed partly on the CPU (engine.planning.placement) runs that part at the ``host``'s speed:
    ``target_on_host``, the target's tensors kept in host memory (its other part is ``target``), and with
    ``draft_on_host`` the whole draft. Each pass then costs the GPU's part plus the host's.
    workload: a shipped workload set's name, whose prior acceptance (ACCEPTANCE_PRIORS) stands in until
    the pair is measured."""
    if measured is None and device is None:
        raise ValueError("a prediction needs the device's speed or a measurement of the pair")
    if measured is not None:
        verify = CostCurve(
            tuple(sorted(measured.verify_ms)), tuple(measured.verify_ms[b] for b in sorted(measured.verify_ms))
        )
        draft_curve = (
            CostCurve(tuple(sorted(measured.draft_ms)), tuple(measured.draft_ms[b] for b in sorted(measured.draft_ms)))
            if measured.draft_ms
            else None
        )
        basis = "measured"
    else:
        assert device is not None
        if (target_on_host is not None or draft_on_host) and host is None:
            raise ValueError("a pair placed partly on the CPU needs the host's speed")
        sizes = tuple(b for b in BATCH_SIZES if b <= k_max + 1)

        def verify_ms(b: int) -> float:
            gpu = device.forward_ms(target, b, n_past)
            return gpu + (host.forward_ms(target_on_host, b, n_past) if host and target_on_host else 0.0)

        draft_device = host if draft_on_host and host is not None else device
        verify = CostCurve(sizes, tuple(verify_ms(b) for b in sizes))
        draft_curve = (
            CostCurve(sizes, tuple(draft_device.forward_ms(draft, b, n_past) for b in sizes))
            if draft is not None
            else None
        )
        basis = "prior"
    if isinstance(acceptance, Sequence):
        cond = [float(a) for a in acceptance] or [acceptance_prior(workload)]
    elif acceptance is not None:
        cond = [acceptance]
    elif measured is not None and measured.acceptance_by_position:
        cond = list(measured.acceptance_by_position)
    else:
        cond = [acceptance_prior(workload)]
    costs = PairCosts(verify, draft_curve, replays=target.replays and not (draft is not None and draft.mtp))
    plain = costs.baseline_tps
    feed = draft is None or not draft.reads_target_cache
    speedups = (
        {k: costs.predict_tps(cond, k, feed_draft=feed) / plain for k in range(1, k_max + 1)} if draft_curve else {}
    )
    best = max(speedups, key=lambda k: speedups[k]) if speedups else None
    if measured is not None:
        band = band_for("measured", device_checked=True)
    else:
        assert device is not None
        # held-out cases ran on a probed CPU alone: a GPU's figures (or a part of the pair on one) are unchecked
        checked = not device.overlap and not device.assumed
        band = band_for(
            "prior",
            device_checked=checked,
            moe=target.expert_share > 0,
            output_heavy=target.output_heavy,
            borrowed=bool(target.borrowed or (draft is not None and draft.borrowed)),
        )
    return Prediction(
        plain_tokens_per_s=plain,
        verify_ms_by_batch={b: verify.at(b) for b in range(1, k_max + 2)},
        draft_ms=draft_curve.at(1) if draft_curve else None,
        speedup_by_k=speedups,
        best_k=best if best is not None and speedups[best] > 1.0 else None,
        acceptance=list(cond),
        basis=basis,
        device=device if measured is None else None,
        method="draft-mtp" if draft is not None and (draft.mtp or draft.reads_target_cache) else "draft-simple",
        band=band,
    )


# how far a measured pass may stray from what batching allows before the curve is taken for a disturbed
# measurement: a pass of B tokens costs at least about one token's pass, and at most about B of them
PLAUSIBLE_LOW, PLAUSIBLE_HIGH = 0.75, 1.5


def plausible_verify_curve(verify_ms: dict[int, float]) -> bool:
    """False for forward times no machine produces undisturbed: a pass of B tokens much faster than a pass of
    one (under PLAUSIBLE_LOW of it), or much slower than B passes of one (over PLAUSIBLE_HIGH x B of it). A
    tune taken while something else held the machine (a first pass paging the weights in, a burst of other
    work) records such a curve, and a speedup predicted from it would be absurd (x9 at K=3)."""
    one = verify_ms.get(1)
    if not one or one <= 0:
        return False
    return all(PLAUSIBLE_LOW * one <= ms <= PLAUSIBLE_HIGH * b * one for b, ms in verify_ms.items() if b > 1)


def measured_from_tune(result: dict) -> Measured:
    """A tune's result as the history keeps it (engine.measure.tuner TuneResult.to_dict)."""
    by_position = result.get("acceptance_by_position") or []
    return Measured(
        verify_ms={int(b): float(ms) for b, ms in (result.get("verify_ms") or {}).items()},
        draft_ms={int(b): float(ms) for b, ms in (result.get("draft_ms") or {}).items()} or None,
        acceptance_by_position=[float(a) for a in by_position],
        source="tune",
    )
