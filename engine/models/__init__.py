"""The model side: reading GGUF headers and checking files before a load (gguf_inspect, gguf_check),
llama.cpp's draft/target vocabulary rule (compat), the catalog of families and presets, the local
library of GGUFs, hub downloads, the bundled demo pair and synthetic test models.

May import engine.core only.
"""
