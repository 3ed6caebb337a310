"""Sliding-window attention: which layers of a model attend through a window, and how many KV cells
llama.cpp gives them.

A model with sliding-window layers (Gemma 2, 3 and 4, gpt-oss, Command R7B, OLMo 2 with a window,
EXAONE 4 32B) gets two KV caches in llama.cpp (src/llama-kv-cache-iswa.cpp): one of the full
context for the other layers, and one for the window layers that holds only

    pad_256(min(n_ctx, n_swa * n_seq + n_ubatch))

cells, since a token never looks further back than the window (n_seq is 1 here: the lab runs one
sequence and the exported llama-server one slot; llama-server's --swa-full, off by default, would
give them the full context). At 32768 tokens of context a Gemma 3 27B layer with a 1024-token
window caches 1536 cells instead of 32768, and five of its six layers are such layers.

Which layers: the GGUF's ``<arch>.attention.sliding_window_pattern`` (an array of flags, or a
period), else each architecture's own rule in the pinned llama.cpp (src/models/<arch>.cpp,
``load_swa_pattern``): with period n, layer il slides unless il % n == n - 1 (or, "dense first",
unless il % n == 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.models.gguf_inspect import ModelInfo

SWA_PAD = 256  # llama_kv_cache_iswa pads the window cache to 256 cells


@dataclass(frozen=True)
class _Rule:
    period: int
    dense_first: bool = False
    default_window: int | None = None  # used when the GGUF has no attention.sliding_window
    needs_window_key: bool = False  # sliding only when the GGUF sets a window > 0
    only_n_layer: int | None = None  # sliding only for this depth (EXAONE 4: the 32B model)


# the pinned llama.cpp's hparams loading per architecture (src/models/*.cpp), for the architectures
# people run for chat. phi3 is not here on purpose: llama.cpp reads its window and then turns
# sliding off (swa_type NONE, a TODO in phi3.cpp), so its cache is a full one (FULL_CACHE_ANYWAY).
RULES = {
    "gemma2": _Rule(2, default_window=4096),
    "gemma3": _Rule(6, needs_window_key=True),
    "gemma4": _Rule(6, needs_window_key=True),  # its GGUF always carries the pattern as an array
    "gpt-oss": _Rule(2),
    "cohere2": _Rule(4),
    "olmo2": _Rule(4, needs_window_key=True),
    "exaone4": _Rule(4, default_window=4096, only_n_layer=64),
}


@dataclass(frozen=True)
class SlidingWindow:
    window: int  # n_swa, in tokens
    layers: tuple[bool, ...]  # per layer: does it slide?

    @property
    def n_sliding(self) -> int:
        return sum(self.layers)

    def cells(self, kv_size: int, n_ubatch: int, n_seq: int = 1) -> int:
        """The cells llama.cpp gives each sliding layer's cache (never more than the full context's)."""
        wanted = min(kv_size, self.window * n_seq + n_ubatch)
        return -(-wanted // SWA_PAD) * SWA_PAD


# architectures whose GGUF may carry a window that the pinned llama.cpp does not use for its cache
FULL_CACHE_ANYWAY = ("phi3",)


def modelled(info: ModelInfo) -> bool:
    """Whether this module knows the architecture's rule (else a window in the GGUF goes unmodelled)."""
    return info.architecture in RULES or info.architecture in FULL_CACHE_ANYWAY


def sliding_window(info: ModelInfo) -> SlidingWindow | None:
    """The model's window and sliding layers as the pinned llama.cpp sets them; None without any."""
    rule = RULES.get(info.architecture or "")
    n_layer = info.block_count or 0
    if rule is None or n_layer <= 0:
        return None
    if rule.only_n_layer is not None and n_layer != rule.only_n_layer:
        return None
    window = info.arch_value("attention.sliding_window")
    if not isinstance(window, int) or isinstance(window, bool):
        if rule.needs_window_key:
            return None
        window = rule.default_window
    if not window or window <= 0:
        return None
    pattern = info.arch_value("attention.sliding_window_pattern")
    if isinstance(pattern, list):
        flags = [bool(v) for v in pattern[:n_layer]]
        layers = tuple(flags + [False] * (n_layer - len(flags)))
    else:
        period = pattern if isinstance(pattern, int) and not isinstance(pattern, bool) else rule.period
        layers = tuple(_slides(il, period, rule.dense_first) for il in range(n_layer))
    return SlidingWindow(window, layers) if any(layers) else None


def _slides(il: int, period: int, dense_first: bool) -> bool:
    """llama_hparams::set_swa_pattern: period 0 makes every layer slide."""
    if period == 0:
        return True
    return il % period != 0 if dense_first else il % period < period - 1
