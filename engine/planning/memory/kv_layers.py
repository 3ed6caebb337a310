"""Which layers keep a KV cache, and how wide its rows are, layer by layer, as the pinned llama.cpp's
hparams say (src/llama-hparams.cpp):

    n_embd_k_gqa(il) = n_embd_head_k(il) * n_head_kv(il)    (and the same for V)
    n_embd_head_k(il) = is_swa(il) ? key_length_swa : key_length
    has_kv(il)        = il < n_layer_kv_from_start           (every layer when that is unset)

key_length_swa defaults to key_length, and head_count_kv may be a per-layer array, so a llama-style
model has one width for all layers. Gemma 4 is the model that uses all three: its global layers have
heads twice as wide as its sliding ones and fewer KV heads (the 26B-A4B header the pinned llama.cpp
ships as models/ggml-vocab-gemma-4.gguf: 2 x 512 against 8 x 256), and E2B / E4B end in layers that
keep no cache of their own: the last ``<arch>.attention.shared_kv_layers`` layers read the caches of
the last sliding and the last global layer before them (src/llama-model.cpp, create_memory: the
reuse callback), so llama_kv_cache allocates nothing for them.
"""

from __future__ import annotations

from engine.models.gguf_inspect import ModelInfo
from engine.planning.memory.sliding_window import SlidingWindow

# architectures whose first n_layer_kv_from_start layers alone keep a KV cache (src/models/<arch>.cpp):
# gemma4 reads it as block_count - attention.shared_kv_layers, gemma3n fixes it at 20
_KV_FROM_START_FIXED = {"gemma3n": 20}
_KV_FROM_SHARED_KEY = ("gemma4",)


def kv_layers_from_start(info: ModelInfo) -> int | None:
    """llama_hparams::n_layer_kv_from_start: only the layers before it keep a KV cache; None: all do."""
    arch = info.architecture or ""
    if arch in _KV_FROM_START_FIXED:
        return _KV_FROM_START_FIXED[arch]
    if arch in _KV_FROM_SHARED_KEY:
        shared = info._arch_int("attention.shared_kv_layers") or 0
        return (info.block_count or 0) - shared
    return None


def _layer_value(info: ModelInfo, suffix: str, il: int) -> int | None:
    """A hyperparameter of layer il: its entry of a per-layer array, or the scalar."""
    value = info.arch_value(suffix)
    if isinstance(value, list):
        value = value[il] if il < len(value) else None
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def head_dims(info: ModelInfo, il: int, window: SlidingWindow | None) -> tuple[int, int]:
    """(n_embd_head_k, n_embd_head_v) of layer il: a sliding layer's come from key_length_swa /
    value_length_swa where the GGUF has them (else they are the full layers')."""
    k, v = info.head_dim_k or 0, info.head_dim_v or 0
    if window is not None and il < len(window.layers) and window.layers[il]:
        k = info._arch_int("attention.key_length_swa") or k
        v = info._arch_int("attention.value_length_swa") or v
    return k, v


def layer_heads(info: ModelInfo, il: int) -> tuple[int, int]:
    """(n_head, n_head_kv) of layer il: its entries of per-layer arrays, or the scalars."""
    n_head = _layer_value(info, "attention.head_count", il)
    n_head_kv = _layer_value(info, "attention.head_count_kv", il)
    return (info.n_head or 0) if n_head is None else n_head, (info.n_head_kv or 0) if n_head_kv is None else n_head_kv


def kv_row_widths(info: ModelInfo, il: int, window: SlidingWindow | None) -> tuple[int, int] | None:
    """(n_embd_k_gqa, n_embd_v_gqa) of layer il's cache rows; None for a layer that allocates no cache:
    no KV heads (no attention), or past n_layer_kv_from_start (it reads an earlier layer's cache)."""
    n_head_kv = _layer_value(info, "attention.head_count_kv", il)
    if n_head_kv is None:
        n_head_kv = info.n_head_kv or 0
    kv_from_start = kv_layers_from_start(info)
    if not n_head_kv or (kv_from_start is not None and il >= kv_from_start):
        return None
    k, v = head_dims(info, il, window)
    return k * n_head_kv, v * n_head_kv
