"""Hybrid models (Qwen3.5, Qwen3-Next): which layers keep a recurrent state instead of a KV cache, how big
that state is, and how many copies of it llama.cpp keeps.

Qwen3.5 (llama.cpp architectures qwen35 and qwen35moe) and Qwen3-Next (qwen3next) are hybrids: three of
every four layers are gated delta-net layers, which carry a fixed-size state from token to token in place
of a KV cache, and every fourth layer is full attention with an ordinary KV cache. The pinned llama.cpp
(src/llama-model.cpp, create_memory: llama_memory_hybrid) gives

- each attention layer a KV cache of the full context, like any other model;
- each recurrent layer two F32 tensors, on its layer's device (src/llama-memory-recurrent.cpp):
  the convolution state r of n_embd_r = (ssm_d_conv - 1) * (ssm_d_inner + 2 * ssm_n_group * ssm_d_state)
  floats and the delta-net state s of n_embd_s = ssm_d_state * ssm_d_inner floats (src/llama-hparams.cpp),
  each with max(1, n_seq_max) * (1 + n_rs_seq) rows, whatever the context.

n_rs_seq: the state snapshots kept per sequence so that a rejected draft rolls back in place. llama.cpp asks
for draft n_max of them when the context is made for draft-mtp, draft-eagle3, draft-dflash or draft-dspark
(common/common.h, need_n_rs_seq) and the architecture can roll back (src/llama-arch.cpp,
llm_arch_supports_rs_rollback: qwen35 and qwen35moe, not qwen3next); otherwise none. A draft model's
context and an MTP context always get none (common/speculative.cpp).

Which layers are recurrent: the GGUF's ``<arch>.attention.recurrent_layers`` (a flag per layer), else every
layer but each ``<arch>.full_attention_interval``-th (default 4: layers 3, 7, 11, ... attend). The MTP block
after the trunk (``<arch>.nextn_predict_layers``, counted in block_count) is never recurrent, and gets no
cache in the main context at all: llama.cpp filters its caches to il < n_layer(), the trunk. The MTP
context that draft-mtp makes holds a plain attention KV cache for the MTP layers alone.

At 32768 tokens of context, Qwen3.5-27B (64 layers, 16 attending, 4 KV heads of 256) caches 2 GiB of K
and V where full attention everywhere would take 8; its 48 recurrent layers add 150 MiB of state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.models.draft_heads import MTP_ARCHITECTURES
from engine.models.gguf_inspect import ModelInfo
from engine.models.tensor_layout import DEFAULT_FULL_ATTENTION_INTERVAL, HYBRID_ARCHITECTURES

# llm_arch_supports_rs_rollback (of the architectures above)
ROLLBACK_ARCHITECTURES = frozenset({"qwen35", "qwen35moe"})
# common_params_speculative::need_n_rs_seq: the types whose target context keeps draft n_max snapshots
SNAPSHOT_TYPES = frozenset({"draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark"})
# src/models/*.cpp: architectures that load their MTP block only for draft-mtp (TENSOR_SKIP otherwise): every
# architecture whose graph builds an MTP head, and nemotron_h, whose loader (shared with nemotron_h_moe) skips
# its next-n tensors the same way though its own graph has no MTP head
MTP_LOADED_ON_DEMAND = MTP_ARCHITECTURES | {"nemotron_h"}
DEFAULT_DRAFT_N_MAX = 3  # common_params_speculative draft.n_max: llama-server's --spec-draft-n-max default
STATE_BYTES = 4  # r and s are F32 (GGML_TYPE_F32 in create_memory)


@dataclass(frozen=True)
class RecurrentLayout:
    """A hybrid model's trunk: per layer whether it is recurrent, and the state each recurrent layer holds."""

    layers: tuple[bool, ...]  # per trunk layer (il < n_layer()): recurrent?
    n_embd_r: int  # floats of convolution state per row
    n_embd_s: int  # floats of delta-net state per row

    @property
    def n_recurrent(self) -> int:
        return sum(self.layers)

    @property
    def n_attention(self) -> int:
        return len(self.layers) - self.n_recurrent

    @property
    def row_bytes(self) -> int:
        """Bytes of one row (one sequence, one snapshot) of one recurrent layer's r and s."""
        return (self.n_embd_r + self.n_embd_s) * STATE_BYTES

    def rows(self, n_rs_seq: int = 0, n_seq: int = 1) -> int:
        """Rows llama.cpp allocates per recurrent layer: max(1, n_seq_max) * (1 + n_rs_seq)."""
        return max(1, n_seq) * (1 + n_rs_seq)

    def state_bytes(self, n_rs_seq: int = 0, n_seq: int = 1) -> int:
        """All recurrent layers' state, unaligned (each tensor is aligned to its buffer on top of this)."""
        return self.n_recurrent * self.row_bytes * self.rows(n_rs_seq, n_seq)


def trunk_layers(info: ModelInfo) -> int:
    """llama.cpp's n_layer(): block_count less the MTP (next-n) layers that follow the trunk."""
    n_layer_all = info.block_count or 0
    nextn = info._arch_int("nextn_predict_layers") or 0
    return max(n_layer_all - nextn, 0) if 0 < nextn <= n_layer_all else n_layer_all


def recurrent_layout(info: ModelInfo) -> RecurrentLayout | None:
    """The hybrid layout as the pinned llama.cpp reads it; None for a model of another architecture."""
    if info.architecture not in HYBRID_ARCHITECTURES:
        return None
    n_layer = trunk_layers(info)
    flags = info.arch_value("attention.recurrent_layers")
    if isinstance(flags, list):
        layers = tuple(bool(v) for v in flags[:n_layer]) + (False,) * max(n_layer - len(flags), 0)
    elif isinstance(flags, bool):
        layers = (flags,) * n_layer
    else:
        interval = info._arch_int("full_attention_interval") or DEFAULT_FULL_ATTENTION_INTERVAL
        layers = tuple((il + 1) % interval != 0 for il in range(n_layer))
    d_conv = info._arch_int("ssm.conv_kernel") or 0
    d_inner = info._arch_int("ssm.inner_size") or 0
    d_state = info._arch_int("ssm.state_size") or 0
    n_group = info._arch_int("ssm.group_count") or 0
    n_embd_r = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
    return RecurrentLayout(layers, n_embd_r, d_state * d_inner)


def is_recurrent(layout: RecurrentLayout | None, il: int) -> bool:
    return layout is not None and il < len(layout.layers) and layout.layers[il]


def snapshots_at_load(info: ModelInfo, spec_types: Iterable[str], draft_n_max: int = DEFAULT_DRAFT_N_MAX) -> int:
    """n_rs_seq of the target's context: draft_n_max when it is made for a type that rolls back by snapshot
    and the architecture can, else 0. draft_n_max <= 0 means llama.cpp's default of 3."""
    if info.architecture not in ROLLBACK_ARCHITECTURES or not SNAPSHOT_TYPES & set(spec_types):
        return 0
    return draft_n_max if draft_n_max > 0 else DEFAULT_DRAFT_N_MAX
