"""How much memory a target (and draft) will take, per device and buffer, before loading them.

Everything here mirrors what the pinned llama.cpp does at load, item by item,
so the plan can be checked against llama.cpp's own breakdown
(llama_get_memory_breakdown, Engine.memory()):

weights   src/llama-model.cpp, llama_model_base::load_tensors: the input layer
          (token_embd) always stays on the CPU; with n_gpu_layers = ngl the
          repeating layers from i_gpu_start = max(n_layer + 1 - ngl, 0) go to the
          GPUs, and the output layer (output.weight, output_norm) counts as layer
          n_layer, so it goes to a GPU only when ngl > n_layer; layers are spread
          over several GPUs in proportion to their free memory (the "splits",
          std::upper_bound). A tied output (no output.weight) is a copy of
          token_embd on the output device. CPU tensors take the first buffer type of
          make_cpu_buft_list that accepts them: with a GPU that is the GPU's pinned
          host buffer, which mmap turns back into the file mapping; without a GPU the
          CPU "extra" buffer types come first (AMX, then CPU_REPACK:
          ggml-cpu/amx/amx.cpp, ggml-cpu/repack.cpp). The file mapping is a
          CPU_Mapped buffer whose size is the span from the first to the last byte of
          its tensors in the file (llama_model_loader::get_mapping_range), not their
          sum, so it can include bytes of tensors that live elsewhere. GPU tensors take
          ggml_nbytes rounded up to 128 bytes, plus one 512-element row of padding for
          quantized types (ggml-cuda: get_alloc_size, MATRIX_ROW_PADDING).
KV cache  src/llama-kv-cache.cpp, llama_kv_cache::llama_kv_cache: per layer one K
          tensor of n_embd_k_gqa x kv_size and one V tensor of n_embd_v_gqa x
          kv_size in the cache types, on the layer's device; kv_size is n_ctx padded
          to a multiple of 256 (src/llama-context.cpp: GGML_PAD(n_ctx, 256)). The
          draft has its own cache of the target's context size. A hybrid model's
          recurrent layers hold a fixed-size state instead (engine.planning.memory.recurrent),
          and the MTP layers after the trunk have a cache only in the MTP context
          draft-mtp makes, which the plan lists as the draft's.
compute   an empirical fit of llama.cpp's reserved compute buffer
          (engine.planning.memory.compute_buffer), measured on the CPU backend.
output    llama_context::output_reserve: n_vocab x n_outputs floats of logits in
          host memory (CPU or the GPU's pinned host buffer). llama.cpp does not list
          it in its memory breakdown, so it is reported but not compared.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.core.units import format_plan_bytes
from engine.models.gguf_inspect import GGML_TYPE_IDS, GGML_TYPES, ModelInfo, TensorInfo, ggml_row_bytes
from engine.planning.memory.compute_buffer import compute_buffer_bytes, moe_numbers, mtp_compute_buffer_bytes
from engine.planning.memory.kv_layers import kv_row_widths
from engine.planning.memory.recurrent import (
    MTP_LOADED_ON_DEMAND,
    STATE_BYTES,
    is_recurrent,
    recurrent_layout,
    snapshots_at_load,
    trunk_layers,
)
from engine.planning.memory.sliding_window import modelled as modelled_window
from engine.planning.memory.sliding_window import sliding_window

KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")  # common/arg.cpp
KV_PAD = 256  # GGML_PAD(n_ctx, 256) in llama_context
CPU_ALIGNMENT = 32  # TENSOR_ALIGNMENT (CPU, AMX and repack buffers)
CUDA_ALIGNMENT = 128  # ggml_backend_cuda_buffer_type_get_alignment
CUDA_MATRIX_ROW_PADDING = 512  # ggml-cuda/common.cuh
DEFAULT_N_BATCH = 2048
DEFAULT_N_UBATCH = 512
# specrt and llama-server size their output buffers for the longest draft: 1 + draft_n_max outputs per
# sequence (common_speculative_get_output_limits); specrt allows drafts up to 64 tokens
DEFAULT_N_OUTPUTS = 65

CPU = "CPU"

Headroom = Callable[[int], int]  # a device's free bytes -> the bytes a plan must leave free on it


def no_headroom(free_bytes: int) -> int:
    """The pre-load check's headroom: none beyond the plan, whose buffers are what llama.cpp allocates (within
    1.5 % on the real pair). The recommender keeps a margin of its own (engine.planning.memory.budget.headroom)."""
    return 0


class PlanError(ValueError):
    """The plan cannot be made from these inputs; the message says why."""


@dataclass(frozen=True)
class GpuBudget:
    """A GPU as llama.cpp names it (CUDA0, CUDA1, ...) and its free memory in bytes."""

    name: str
    free_bytes: int


@dataclass(frozen=True)
class PlanItem:
    model: str  # "target" | "draft"
    kind: str  # "weights" | "kv_cache" | "compute" | "output"
    buffer_type: str  # llama.cpp's buffer type name: CUDA0, CUDA_Host, CPU, CPU_Mapped, AMX, CPU_REPACK
    device: str  # where the bytes live: a GPU name, or CPU for host memory
    bytes: int
    detail: str = ""


@dataclass
class MemoryPlan:
    items: list[PlanItem]
    n_ctx: int  # the context llama.cpp allocates (padded)
    n_ubatch: dict[str, int]  # model -> tokens of the worst-case graph llama.cpp reserves
    layers: dict[str, dict]  # model -> {"by_device": {device: repeating layers}, "output_device": ...}
    gpus: list[GpuBudget] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def total(
        self,
        *,
        model: str | None = None,
        kind: str | None = None,
        device: str | None = None,
        buffer_type: str | None = None,
    ) -> int:
        return sum(
            i.bytes
            for i in self.items
            if (model is None or i.model == model)
            and (kind is None or i.kind == kind)
            and (device is None or i.device == device)
            and (buffer_type is None or i.buffer_type == buffer_type)
        )

    def device_totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for i in self.items:
            out[i.device] = out.get(i.device, 0) + i.bytes
        return out

    @property
    def fits(self) -> bool | None:
        """Every GPU's planned bytes within its free memory; None without a GPU budget."""
        if not self.gpus:
            return None
        return not short_devices(self.device_totals(), self.gpus, None, no_headroom)

    def to_dict(self) -> dict:
        totals = self.device_totals()
        return {
            "n_ctx": self.n_ctx,
            "n_ubatch": self.n_ubatch,
            "layers": self.layers,
            "items": [vars(i).copy() for i in self.items],
            "totals": {
                "by_device": totals,
                "vram_bytes": sum(v for k, v in totals.items() if k != CPU),
                "host_bytes": totals.get(CPU, 0),
                "all_bytes": sum(totals.values()),
            },
            "gpus": [
                {
                    "name": g.name,
                    "free_bytes": g.free_bytes,
                    "planned_bytes": totals.get(g.name, 0),
                    "headroom_bytes": g.free_bytes - totals.get(g.name, 0),
                }
                for g in self.gpus
            ],
            "fits": self.fits,
            "notes": self.notes,
        }


def short_devices(
    totals: Mapping[str, int], gpus: Sequence[GpuBudget], ram_bytes: int | None, keep: Headroom
) -> list[str]:
    """The one rule of "it fits", which every check in SpecTune applies (engine.planning.memory.budget.fits):
    a device is short when its planned bytes pass its free bytes less what ``keep`` holds back on it. With GPUs,
    each GPU by name, then CPU when the plan's host part passes the RAM; without, CPU when the whole plan does.
    An unknown RAM (None) is never short: nothing is checked against it."""

    def short(used: int, free: int) -> bool:
        return used > free - keep(free)

    if not gpus:
        whole = sum(totals.values())
        return [CPU] if ram_bytes is not None and short(whole, ram_bytes) else []
    out = [g.name for g in gpus if short(totals.get(g.name, 0), g.free_bytes)]
    if ram_bytes is not None and short(totals.get(CPU, 0), ram_bytes):
        out.append(CPU)
    return out


# -- where each layer goes -----------------------------------------------------------


def layer_devices(n_layer: int, n_gpu_layers: int, gpus: list[GpuBudget]) -> list[str]:
    """Device of layers 0..n_layer-1 and of the output layer (index n_layer), as load_tensors assigns them.

    n_gpu_layers < 0 means all (llama_model::n_gpu_layers: n_layer + 1).
    """
    if n_layer < 0:
        raise PlanError(f"a model cannot have {n_layer} layers")
    ngl = n_layer + 1 if n_gpu_layers < 0 else n_gpu_layers
    i_gpu_start = max(n_layer + 1 - ngl, 0)
    act_gpu_layers = min(ngl, n_layer + 1) if gpus else 0
    # default split: by free memory, normalised to cumulative split points
    free = [max(g.free_bytes, 0) for g in gpus]
    total = sum(free)
    splits, acc = [], 0.0
    for f in free:
        acc += f / total if total else 1.0 / len(free)
        splits.append(acc)
    out = []
    for il in range(n_layer + 1):
        if il < i_gpu_start or il - i_gpu_start >= act_gpu_layers:
            out.append(CPU)
        else:
            index = bisect.bisect_right(splits, (il - i_gpu_start) / act_gpu_layers)
            out.append(gpus[min(index, len(gpus) - 1)].name)
    return out


_BLOCK = re.compile(r"^blk\.(\d+)\.")
_EXPERTS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")  # common.h, LLM_FFN_EXPS_REGEX
_GET_ROWS_NAMES = (
    "token_embd",
    "pos_embd",
    "token_types",
    "per_layer_token_embd",
    "nextn.embed_tokens",
    "d2t",
    "markov_w1",
    "selector_predecessor",
    "selector_successor",
)


def tensor_layer(name: str, n_layer: int) -> int | None:
    """Layer index of a tensor; n_layer for the output layer; None for the input layer."""
    m = _BLOCK.match(name)
    if m:
        return int(m.group(1))
    return n_layer if name.startswith("output") else None


def expert_on_cpu(name: str, n_cpu_moe: int) -> bool:
    """Whether --n-cpu-moe N (N < 0: --cpu-moe) keeps this tensor in host memory: an expert tensor of one
    of the first N layers."""
    if not n_cpu_moe or not _EXPERTS.search(name):
        return False
    m = _BLOCK.match(name)
    return m is not None and (n_cpu_moe < 0 or int(m.group(1)) < n_cpu_moe)


def tensor_op(t: TensorInfo) -> str:
    """The op llama.cpp probes buffer types with (LLM_TENSOR_INFOS), by name."""
    base = _BLOCK.sub("", t.name).removesuffix(".weight")
    if base in _GET_ROWS_NAMES:
        return "GET_ROWS"
    if "_exps" in base:
        return "MUL_MAT_ID"
    if len(t.shape) >= 2 and t.name.endswith(".weight"):
        return "MUL_MAT"
    return "OTHER"


# -- CPU extra buffer types ------------------------------------------------------------

# AMX (ggml-cpu/amx/amx.cpp, extra_buffer_type::supports_op): row alignment per weight type
_AMX_K_ALIGN = {"F16": 16, "Q4_0": 32, "Q4_1": 32, "Q8_0": 32, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256, "IQ4_XS": 256}
# bytes AMX adds per block when it packs a row (amx/mmq.cpp, get_row_size)
_AMX_EXTRA_PER_BLOCK = {"Q8_0": 4, "Q4_K": 4, "Q5_K": 4, "IQ4_XS": 2}
# CPU_REPACK on x86 (ggml-cpu/repack.cpp, ggml_repack_get_optimal_repack_type): type -> CPU feature needed
_REPACK_X86 = {"Q4_0": "avx2", "Q4_K": "avx2", "IQ4_NL": "avx2", "MXFP4": "avx2", "Q2_K": "avx512"}


def cpu_extra_buffer(t: TensorInfo, cpu_features: Iterable[str]) -> tuple[str, int] | None:
    """(buffer type, bytes) of the first CPU extra buffer type that takes this tensor, or None."""
    features = set(cpu_features)
    op = tensor_op(t)
    if op != "MUL_MAT":
        return None
    ne0, ne1 = t.shape[0], t.shape[1]
    if "amx" in features and t.type_name in _AMX_K_ALIGN and ne1 % 32 == 0 and ne0 % _AMX_K_ALIGN[t.type_name] == 0:
        block = GGML_TYPES[t.type_id][1]
        extra = _AMX_EXTRA_PER_BLOCK.get(t.type_name, 0) * (ne0 // block) * (t.n_elements // ne0)
        return "AMX", t.n_bytes + extra
    needed = _REPACK_X86.get(t.type_name)
    if needed and needed in features and len(t.shape) == 2 and ne1 % 8 == 0:
        return "CPU_REPACK", t.n_bytes
    return None


def align(n: int, alignment: int) -> int:
    return n + (-n) % alignment


def gpu_tensor_bytes(type_name: str, shape: tuple[int, ...], n_bytes: int) -> int:
    """What a CUDA buffer allocates for a tensor (before the 128-byte rounding)."""
    block = GGML_TYPES[GGML_TYPE_IDS[type_name]][1]
    if block > 1 and shape and shape[0] % CUDA_MATRIX_ROW_PADDING:
        n_bytes += ggml_row_bytes(type_name, CUDA_MATRIX_ROW_PADDING - shape[0] % CUDA_MATRIX_ROW_PADDING)
    return n_bytes


# -- weights, KV cache, compute ------------------------------------------------------------


def weight_items(
    info: ModelInfo,
    model: str,
    devices: list[str],
    cpu_features: Iterable[str],
    use_mmap: bool = True,
    host_buffer: str | None = None,
    cpu_expert_layers: int = 0,
    load_mtp: bool = True,
) -> list[PlanItem]:
    """Weights per buffer type. host_buffer: the GPU's pinned host buffer type (CUDA_Host) when GPUs exist.
    cpu_expert_layers: the expert tensors of that many first layers (-1: all) are held on the CPU, as
    llama-server's --n-cpu-moe / --cpu-moe override their buffer type (common.h, llm_ffn_exps_cpu_override):
    the plain CPU buffer type, so neither the pinned host buffer nor a repacking type.
    load_mtp=False: the MTP (next-n) block after the trunk is not loaded, as llama.cpp skips it for the
    architectures that load it only for draft-mtp (engine.planning.memory.recurrent.MTP_LOADED_ON_DEMAND)."""
    n_layer = len(devices) - 1
    n_trunk = trunk_layers(info) if not load_mtp and info.architecture in MTP_LOADED_ON_DEMAND else n_layer
    by_buffer: dict[str, int] = {}
    mapped: list[TensorInfo] = []

    def place(t: TensorInfo, device: str, duplicate: bool = False, overridden: bool = False) -> None:
        if device != CPU:
            size = align(gpu_tensor_bytes(t.type_name, t.shape, t.n_bytes), CUDA_ALIGNMENT)
            by_buffer[device] = by_buffer.get(device, 0) + size
            return
        # the pinned host buffer precedes the extra buffer types in make_cpu_buft_list
        extra = None if host_buffer or overridden else cpu_extra_buffer(t, cpu_features)
        if extra:
            by_buffer[extra[0]] = by_buffer.get(extra[0], 0) + align(extra[1], CPU_ALIGNMENT)
        elif use_mmap:
            if not duplicate:  # a duplicate reads the same bytes of the mapping
                mapped.append(t)
        else:
            buffer = CPU if overridden else host_buffer or CPU
            by_buffer[buffer] = by_buffer.get(buffer, 0) + align(t.n_bytes, CPU_ALIGNMENT)

    names = {t.name for t in info.tensors}
    for t in info.tensors:
        layer = tensor_layer(t.name, n_layer)
        if layer is not None and n_trunk <= layer < n_layer:
            continue  # TENSOR_SKIP: neither allocated nor mapped
        if expert_on_cpu(t.name, cpu_expert_layers):
            place(t, CPU, overridden=True)
            continue
        place(t, CPU if layer is None or layer > n_layer else devices[layer])
    embd = next((t for t in info.tensors if t.name == "token_embd.weight"), None)
    if "output.weight" not in names and embd is not None:
        # tied embeddings: llama.cpp creates output.weight as a duplicate of token_embd on the output device
        place(
            TensorInfo(
                "output.weight", embd.shape, embd.type_name, embd.type_id, embd.offset, embd.n_elements, embd.n_bytes
            ),
            devices[n_layer],
            duplicate=True,
        )
    if mapped:
        by_buffer["CPU_Mapped"] = max(t.offset + t.n_bytes for t in mapped) - min(t.offset for t in mapped)
    items = []
    for buffer_type, size in by_buffer.items():
        device = CPU if buffer_type in (CPU, "CPU_Mapped", "AMX", "CPU_REPACK", host_buffer) else buffer_type
        items.append(PlanItem(model, "weights", buffer_type, device, size, _weights_detail(buffer_type)))
    return items


def _weights_detail(buffer_type: str) -> str:
    return {
        "CPU_Mapped": "span of the file mapped for the CPU tensors",
        "AMX": "CPU weights repacked for AMX",
        "CPU_REPACK": "CPU weights repacked for SIMD",
        CPU: "CPU weights read into memory",
    }.get(buffer_type, "CPU weights in pinned memory" if buffer_type.endswith("_Host") else "GPU weights")


def kv_cache_items(
    info: ModelInfo,
    model: str,
    devices: list[str],
    kv_size: int,
    cache_type_k: str,
    cache_type_v: str,
    n_ubatch: int = 512,
    n_rs_seq: int = 0,
    mtp_context: bool = False,
) -> list[PlanItem]:
    """The KV cache per device. Sliding-window layers (engine.planning.memory.sliding_window) hold only their
    window plus one ubatch of cells, in the second cache llama.cpp keeps for them. A hybrid model's
    recurrent layers (engine.planning.memory.recurrent) hold their state instead, with 1 + n_rs_seq rows, which
    llama.cpp's breakdown counts with the KV cache. The MTP (next-n) layers after the trunk have no cache
    in the main context; mtp_context=True plans the MTP context's, which holds only theirs."""
    n_layer = len(devices) - 1
    n_trunk = trunk_layers(info)
    window = sliding_window(info)
    swa_cells = window.cells(kv_size, n_ubatch) if window else kv_size
    layout = None if mtp_context else recurrent_layout(info)
    by_device: dict[str, int] = {}
    state_by_device: dict[str, int] = {}
    for il in range(n_trunk, n_layer) if mtp_context else range(min(n_trunk, n_layer)):
        if is_recurrent(layout, il):
            assert layout is not None
            rows = layout.rows(n_rs_seq)
            size = sum(_state_tensor_bytes(n, rows, devices[il]) for n in (layout.n_embd_r, layout.n_embd_s))
            state_by_device[devices[il]] = state_by_device.get(devices[il], 0) + size
            continue
        widths = kv_row_widths(info, il, window)  # per layer: Gemma 4's global and sliding layers differ
        if widths is None:
            continue  # a layer without attention, or one that reads an earlier layer's cache
        cells = swa_cells if window and il < len(window.layers) and window.layers[il] else kv_size
        size = 0
        for cache_type, n_embd_gqa in zip((cache_type_k, cache_type_v), widths):
            shape = (n_embd_gqa, cells)
            n_bytes = ggml_row_bytes(cache_type, n_embd_gqa) * cells
            if devices[il] == CPU:
                size += align(n_bytes, CPU_ALIGNMENT)
            else:
                size += align(gpu_tensor_bytes(cache_type.upper(), shape, n_bytes), CUDA_ALIGNMENT)
        by_device[devices[il]] = by_device.get(devices[il], 0) + size
    detail = f"K {cache_type_k} + V {cache_type_v}, {kv_size} cells"
    if mtp_context:
        detail += f" (the MTP context: {n_layer - n_trunk} next-n layer(s))"
    if window:
        detail += f" ({window.n_sliding} of {n_layer} layers slide over {window.window} tokens: {swa_cells} cells each)"
    if layout:
        detail += f" ({layout.n_attention} attention layers of {len(layout.layers)})"
    items = [PlanItem(model, "kv_cache", device, device, size, detail) for device, size in by_device.items()]
    if layout:
        state = (
            f"recurrent state: {layout.n_recurrent} layers x {layout.rows(n_rs_seq)} row(s) "
            f"({n_rs_seq} rollback snapshots) of {layout.row_bytes} bytes, F32"
        )
        items += [PlanItem(model, "kv_cache", d, d, size, state) for d, size in state_by_device.items()]
    return items


def _state_tensor_bytes(n_embd: int, rows: int, device: str) -> int:
    """One recurrent state tensor (F32, n_embd x rows) in its layer's buffer."""
    n_bytes = n_embd * rows * STATE_BYTES
    return align(n_bytes, CPU_ALIGNMENT if device == CPU else CUDA_ALIGNMENT)


# -- the plan -------------------------------------------------------------------------------


def _check_model(info: ModelInfo, role: str) -> None:
    missing = [
        name
        for name, value in (
            ("block_count", info.block_count),
            ("embedding_length", info.n_embd),
            ("attention.head_count", info.n_head),
        )
        if not value
    ]
    if missing:
        raise PlanError(
            f"the {role} model {info.path} does not state {', '.join(missing)} "
            f"for architecture {info.architecture!r}; it cannot be planned"
        )
    if not info.tensors:
        raise PlanError(f"the {role} model {info.path} holds no tensors (a vocab-only file)")


def _check_cache_type(name: str, which: str) -> str:
    if name.lower() not in KV_CACHE_TYPES:
        raise PlanError(f"{which} cache type {name!r} is not one llama.cpp accepts ({', '.join(KV_CACHE_TYPES)})")
    return name.lower()


def plan_memory(
    target: ModelInfo,
    n_ctx: int,
    *,
    draft: ModelInfo | None = None,
    n_gpu_layers: int = -1,
    n_gpu_layers_draft: int = -1,
    cache_type_k: str = "f16",
    cache_type_v: str = "f16",
    cache_type_k_draft: str = "f16",
    cache_type_v_draft: str = "f16",
    gpus: Sequence[GpuBudget] | None = None,
    cpu_features: Iterable[str] = (),
    n_batch: int = DEFAULT_N_BATCH,
    n_ubatch: int = DEFAULT_N_UBATCH,
    n_outputs: int = DEFAULT_N_OUTPUTS,
    n_outputs_draft: int | None = None,
    flash_attn: bool = True,
    use_mmap: bool = True,
    n_cpu_moe: int = 0,
    n_cpu_moe_draft: int = 0,
    target_devices: Sequence[str] | None = None,
    draft_devices: Sequence[str] | None = None,
    n_rs_seq: int = 0,
    mtp: bool = False,
) -> MemoryPlan:
    """The memory plan of a target (and draft) loaded as specrt / llama-server load them.

    n_ctx 0 means the target's trained context. gpus empty: a CPU-only build.
    n_cpu_moe: the expert weights of the first N layers stay in host memory (-1: every layer's), as
    llama-server's --n-cpu-moe (--cpu-moe) keeps them; n_cpu_moe_draft the same for the draft.
    target_devices / draft_devices: the GPUs (llama.cpp names) each model's layers may use, as
    llama-server's -dev / -devd restrict them; None: all of them, llama.cpp's default. Layers are
    split over a model's GPUs by their free memory when it loads, so the draft, loaded after the
    target, splits by what the target left free.
    cpu_features (engine.planning.hardware.cpu_features) decide the CPU extra buffer types.
    n_outputs: output rows the contexts are sized for; specrt uses 65 for both,
    llama-server n_parallel * (1 + draft_n_max) for the target and n_parallel for
    the draft.
    n_rs_seq: the recurrent-state snapshots the target's context keeps for rollback (a hybrid model's;
    engine.planning.memory.recurrent.snapshots_at_load), 0 unless it is loaded for draft-mtp or a draft head.
    mtp: the target is loaded for draft-mtp without a draft model: its MTP block is loaded, and the MTP
    context llama.cpp makes for it is planned as the "draft" (its KV cache and compute buffer; its
    weights are the target's). load_options gives both as specrt loads a pair.
    """
    gpus = list(gpus or [])
    cpu_features = tuple(cpu_features)
    _check_model(target, "target")
    if draft is not None:
        _check_model(draft, "draft")
    ctk, ctv = _check_cache_type(cache_type_k, "K"), _check_cache_type(cache_type_v, "V")
    ctkd, ctvd = _check_cache_type(cache_type_k_draft, "draft K"), _check_cache_type(cache_type_v_draft, "draft V")
    _check_settings(target, draft, (ctv, ctvd), flash_attn, n_ctx, n_batch, n_ubatch, n_outputs, n_rs_seq, mtp)
    requested_ctx = n_ctx or target.n_ctx_train or 0
    if requested_ctx <= 0:
        raise PlanError(f"no context size given and {target.path} does not state its trained context")
    kv_size = align(requested_ctx, KV_PAD)
    if n_cpu_moe < -1 or n_cpu_moe_draft < -1:
        raise PlanError("n_cpu_moe must be -1 (every layer), 0 (none) or a layer count")
    outputs_draft = n_outputs if n_outputs_draft is None else n_outputs_draft
    shared = _Shared(
        gpus, cpu_features, kv_size, n_batch, n_ubatch, flash_attn, use_mmap, n_rs_seq, mtp, (ctkd, ctvd), outputs_draft
    )
    target_gpus, draft_gpus = _restricted(gpus, target_devices, "target"), _restricted(gpus, draft_devices, "draft")
    loads = [_Load("target", target, requested_ctx, n_gpu_layers, (ctk, ctv), n_outputs, n_cpu_moe, target_gpus)]
    if draft is not None:
        # the draft context is asked for the target's allocated context (common/speculative.cpp:
        # cparams.n_ctx = llama_n_ctx(ctx_tgt)), so its batch cap differs from the target's
        loads.append(
            _Load("draft", draft, kv_size, n_gpu_layers_draft, (ctkd, ctvd), outputs_draft, n_cpu_moe_draft, draft_gpus)
        )
    plan = MemoryPlan([], kv_size, {}, {}, gpus, [])
    for load in loads:
        _plan_model(plan, load, shared)
    return plan


def _check_settings(
    target: ModelInfo,
    draft: ModelInfo | None,
    v_caches: tuple[str, str],
    flash_attn: bool,
    n_ctx: int,
    n_batch: int,
    n_ubatch: int,
    n_outputs: int,
    n_rs_seq: int,
    mtp: bool,
) -> None:
    """The PlanError for plan_memory's settings that llama.cpp would refuse or that contradict each other."""
    quantized_v = [t for t in v_caches if GGML_TYPES[GGML_TYPE_IDS[t.upper()]][1] > 1]
    if quantized_v and not flash_attn:
        raise PlanError(f"a quantized V cache ({quantized_v[0]}) needs flash attention, which is off")
    if n_ctx < 0 or n_batch < 1 or n_ubatch < 1 or n_outputs < 1:
        raise PlanError("n_ctx must be >= 0 and n_batch, n_ubatch and n_outputs >= 1")
    if n_rs_seq < 0:
        raise PlanError("n_rs_seq must be >= 0")
    if mtp and draft is not None:
        raise PlanError("an MTP context is made only without a draft model")
    if mtp and not trunk_layers(target) < (target.block_count or 0):
        raise PlanError(f"the target {target.path} has no MTP (next-n) layers to draft with")


@dataclass(frozen=True)
class _Shared:
    """The settings both models of a plan load with (plan_memory's, checked)."""

    gpus: list[GpuBudget]
    cpu_features: tuple[str, ...]
    kv_size: int  # the context llama.cpp allocates (padded), the target's and the draft's
    n_batch: int
    n_ubatch: int
    flash_attn: bool
    use_mmap: bool
    n_rs_seq: int
    mtp: bool
    # the draft's cache types (K, V) and output rows, which the MTP context takes too
    draft_cache_types: tuple[str, str]
    n_outputs_draft: int


@dataclass(frozen=True)
class _Load:
    """One model of the plan and what it is loaded with."""

    role: str  # "target" | "draft"
    info: ModelInfo
    ctx_asked: int  # the context its llama_context is asked for (unpadded for the target)
    n_gpu_layers: int
    cache_types: tuple[str, str]  # K, V
    n_outputs: int
    cpu_expert_layers: int  # n_cpu_moe
    gpus: list[GpuBudget]  # the GPUs its layers may use


def _plan_model(plan: MemoryPlan, load: _Load, shared: _Shared) -> None:
    """One model's micro-batch, layer placement, items and notes, added to the plan (with the MTP context's)."""
    role, info, gpus = load.role, load.info, shared.gpus
    # llama_context: n_batch is capped by the requested (unpadded) context, n_ubatch by n_batch
    batch = min(load.ctx_asked, shared.n_batch)
    ubatch = plan.n_ubatch[role] = min(batch, shared.n_ubatch)
    devices = layer_devices(info.block_count or 0, load.n_gpu_layers, _gpus_left(plan, load))
    counts: dict[str, int] = {}
    for device in devices[:-1]:
        counts[device] = counts.get(device, 0) + 1
    plan.layers[role] = {"by_device": counts, "output_device": devices[-1]}
    host_buffer = _host_buffer(gpus) if gpus else None
    is_target = role == "target"
    plan.items += weight_items(
        info, role, devices, shared.cpu_features, shared.use_mmap, host_buffer, load.cpu_expert_layers, shared.mtp
    )
    if not _reads_target_cache(info):
        type_k, type_v = load.cache_types
        n_rs_seq = shared.n_rs_seq if is_target else 0
        plan.items += kv_cache_items(info, role, devices, shared.kv_size, type_k, type_v, ubatch, n_rs_seq)
    plan.items += _compute_items(info, role, devices, gpus, shared.kv_size, ubatch, load.n_outputs, shared.flash_attn)
    if is_target and shared.mtp:
        _plan_mtp_context(plan, info, devices, shared)
    plan.items.append(_output_item(role, info, devices, gpus, min(load.n_outputs, batch)))
    plan.notes += _model_notes(role, info, gpus, load.cpu_expert_layers)


def _gpus_left(plan: MemoryPlan, load: _Load) -> list[GpuBudget]:
    """The GPUs a model's layers are split over, by their free memory when it loads: the draft, loaded after
    the target, splits by what the target left free."""
    if load.role != "draft" or len(load.gpus) <= 1:
        return load.gpus
    held: dict[str, int] = {}
    for i in plan.items:
        held[i.device] = held.get(i.device, 0) + i.bytes
    return [GpuBudget(g.name, max(g.free_bytes - held.get(g.name, 0), 0)) for g in load.gpus]


def _reads_target_cache(info: ModelInfo) -> bool:
    # a Gemma 4 assistant's layers read the target's KV cache (src/llama-model.cpp, LLM_ARCH_GEMMA4_ASSISTANT
    # shares the target's last two layers' caches): it keeps none of its own
    return info.speculative_role == "gemma4-assistant"


def _plan_mtp_context(plan: MemoryPlan, info: ModelInfo, devices: list[str], shared: _Shared) -> None:
    """The MTP context llama.cpp makes for a target loaded for draft-mtp, planned as the "draft": asked for
    the target's allocated context, with the draft's cache types and output count."""
    gpus, kv_size, mtp_outputs = shared.gpus, shared.kv_size, shared.n_outputs_draft
    ctkd, ctvd = shared.draft_cache_types
    mtp_ubatch = plan.n_ubatch["draft"] = min(kv_size, shared.n_batch, shared.n_ubatch)
    plan.items += kv_cache_items(info, "draft", devices, kv_size, ctkd, ctvd, mtp_ubatch, mtp_context=True)
    plan.items += _compute_items(
        info, "draft", devices, gpus, kv_size, mtp_ubatch, mtp_outputs, shared.flash_attn, True
    )
    plan.items.append(_output_item("draft", info, devices, gpus, min(mtp_outputs, mtp_ubatch)))
    plan.notes.append(
        "draft: the MTP context runs on the target's weights (llama.cpp's breakdown lists them again "
        "for it); its compute buffer is a fit measured on generated qwen35 models only"
    )


def _output_item(role: str, info: ModelInfo, devices: list[str], gpus: list[GpuBudget], n_outputs: int) -> PlanItem:
    """The logits buffer of n_outputs rows, in the host memory of the output layer's device."""
    host = CPU if not gpus or devices[-1] == CPU else _host_buffer(gpus)
    return PlanItem(
        role,
        "output",
        host,
        CPU,
        info.vocab.n_tokens * n_outputs * 4,
        f"logits of {n_outputs} outputs (host memory, not in llama.cpp's breakdown)",
    )


def _model_notes(role: str, info: ModelInfo, gpus: list[GpuBudget], cpu_expert_layers: int) -> list[str]:
    """What the plan of this model leaves unmodelled or takes from a fit, for the reader of the plan."""
    notes = []
    if _reads_target_cache(info):
        notes.append(
            f"{role}: a Gemma 4 assistant keeps no KV cache (it reads the target's); its compute buffer is a fit "
            "on generated assistants (exact on those 512 wide or more, up to 30 % high on smaller ones)"
        )
    elif info.arch_value("attention.sliding_window") and not modelled_window(info):
        notes.append(
            f"{role}: {info.architecture}.attention.sliding_window is set, and which layers slide is not "
            "known here for this architecture: the plan counts full-context caches for all of them"
        )
    if info.architecture == "gemma4":
        notes.append(
            f"{role}: the compute buffer of a Gemma 4 is a fit on generated gemma4 models (exact where a layer "
            "decides it, within 11 % where the logits do); per-layer embeddings and MoE layers are added from "
            "llama.cpp's graph, not measured"
        )
    elif sliding_window(info):
        notes.append(
            f"{role}: the compute buffer of a sliding-window model comes from the fit for full attention with "
            "its two masks (on generated gemma3 it was 9 % low to 11 % high); its KV caches are llama.cpp's own "
            "sizes"
        )
    if info.arch_value("ssm.state_size") and recurrent_layout(info) is None:
        notes.append(
            f"{role}: {info.architecture}.ssm.state_size is set; recurrent state is not modelled, so the plan "
            "may be off for this model"
        )
    if gpus and moe_numbers(info)[0] and cpu_expert_layers:
        notes.append(
            f"{role}: experts held on the CPU run there; the CPU compute buffer that llama.cpp adds for "
            "them is not modelled (measured on the CPU backend only)"
        )
    return notes


def load_options(
    target: ModelInfo,
    draft: ModelInfo | None,
    draft_n_max: int = 0,
    spec_types: Sequence[str] | None = None,
) -> dict[str, Any]:
    """plan_memory's n_rs_seq and mtp for a pair loaded as specrt loads it (native set_draft_params): with a
    draft model the contexts are made for draft-simple, or for the file's own type when it is a DFlash or
    DSpark draft; without one, a target whose last block holds an MTP head (blk.N.nextn.eh_proj,
    common_speculative_types_from_gguf) is loaded for draft-mtp.
    spec_types: the --spec-type list a llama-server starts with, instead. draft_n_max: the K it is loaded
    for (LoadSettings.draft_n_max_at_load, --spec-draft-n-max; 0: llama.cpp's 3)."""
    if spec_types is None:
        last = (target.block_count or 0) - 1
        has_head = any(t.name == f"blk.{last}.nextn.eh_proj.weight" for t in target.tensors)
        block_draft = draft is not None and draft.speculative_role in ("dflash", "dspark")
        if draft is not None and draft.speculative_role == "gemma4-assistant":
            spec_types = ["draft-mtp"]  # specrt and llama-server load an assistant for draft-mtp
        elif draft is not None:
            spec_types = [f"draft-{draft.speculative_role}"] if block_draft else ["draft-simple"]
        else:
            spec_types = ["draft-mtp"] if has_head else []
    mtp = draft is None and "draft-mtp" in spec_types and trunk_layers(target) < (target.block_count or 0)
    return {"n_rs_seq": snapshots_at_load(target, spec_types, draft_n_max), "mtp": mtp}


def _restricted(gpus: list[GpuBudget], names: Sequence[str] | None, role: str) -> list[GpuBudget]:
    """The GPUs a model may use: all of them, or those named (in the budget's order)."""
    if names is None:
        return gpus
    known = {g.name for g in gpus}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise PlanError(
            f"{role} device {', '.join(unknown)} is not among the GPUs planned for ({', '.join(known) or 'none'})"
        )
    return [g for g in gpus if g.name in names]


def _host_buffer(gpus: list[GpuBudget]) -> str:
    """The first GPU's pinned host buffer type (CUDA0 -> CUDA_Host); plain CPU memory without GPUs."""
    return f"{gpus[0].name.rstrip('0123456789')}_Host" if gpus else CPU


def _compute_items(
    info: ModelInfo,
    role: str,
    devices: list[str],
    gpus: list[GpuBudget],
    kv_size: int,
    ubatch: int,
    outputs: int,
    flash_attn: bool,
    mtp_context: bool = False,
) -> list[PlanItem]:
    fit = "mtp_compute_buffer_bytes" if mtp_context else "compute_buffer_bytes"
    if mtp_context:
        size = mtp_compute_buffer_bytes(info, kv_size, ubatch, outputs)
        devices = [devices[il] for il in range(trunk_layers(info), len(devices) - 1)] + devices[-1:]
    else:
        size = compute_buffer_bytes(info, kv_size, ubatch, outputs, flash_attn)
    if not gpus:
        return [PlanItem(role, "compute", CPU, CPU, size, f"empirical fit (see {fit})")]
    # each device that runs layers reserves the worst-case graph; the CPU keeps at least the
    # input embeddings (get_rows of token_embd) in the GPU's pinned host buffer
    items = []
    host_buffer = _host_buffer(gpus)
    for device in dict.fromkeys(devices):
        if device == CPU:
            continue
        items.append(PlanItem(role, "compute", device, device, size, "empirical fit (CPU-measured)"))
    cpu_size = size if CPU in devices[:-1] else 2 * 4 * ubatch * (info.n_embd or 0)
    items.append(
        PlanItem(
            role,
            "compute",
            host_buffer,
            CPU,
            cpu_size,
            "CPU graph" if CPU in devices[:-1] else "input embeddings (estimate)",
        )
    )
    return items


def parse_size(text: str) -> int:
    """'24GiB', '24G', '8000M', '1.5T', '123456' -> bytes (binary units)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise PlanError(f"cannot read the size {text!r}; write it like 24GiB, 8000M or 1.5T")
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[m.group(2).upper()]
    return int(float(m.group(1)) * scale)


def format_plan(plan: MemoryPlan) -> str:
    d = plan.to_dict()
    lines = [
        f"context {plan.n_ctx} cells, micro-batch "
        + ", ".join(f"{n} tokens ({role})" for role, n in plan.n_ubatch.items())
    ]
    for role, placement in plan.layers.items():
        placed = ", ".join(f"{n} on {dev}" for dev, n in placement["by_device"].items())
        lines.append(f"{role}: layers {placed}; output layer on {placement['output_device']}")
    lines.append(f"{'model':<7} {'item':<9} {'buffer':<11} {'device':<7} {'size':>12}")
    for i in plan.items:
        lines.append(
            f"{i.model:<7} {i.kind:<9} {i.buffer_type:<11} {i.device:<7} {format_plan_bytes(i.bytes):>12}  {i.detail}"
        )
    for device, total in d["totals"]["by_device"].items():
        lines.append(f"total on {device}: {format_plan_bytes(total)}")
    for g in d["gpus"]:
        verdict = "fits" if g["headroom_bytes"] >= 0 else "does NOT fit"
        lines.append(
            f"{g['name']}: {format_plan_bytes(g['planned_bytes'])} of {format_plan_bytes(g['free_bytes'])} free: "
            f"{verdict} ({format_plan_bytes(g['headroom_bytes'])} headroom)"
        )
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines)
