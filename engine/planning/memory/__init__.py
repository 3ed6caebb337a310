"""How much memory a target and draft take, and whether that fits: llama.cpp's own arithmetic, before loading.

memory_plan      the memory a target and draft take, per device and buffer, before they load
kv_layers        which layers keep a KV cache, and how wide its rows are
sliding_window   sliding-window attention layers and how many KV cells they keep
recurrent        hybrid models' layers that keep a recurrent state instead of a KV cache
compute_buffer   llama.cpp's reserved compute buffer, as empirical fits
budget           the memory a plan is held against (one Budget type), and fits(): the one rule for "it fits"
fit              a pair's files planned and held against the free memory, with llama.cpp's own fallbacks
"""
