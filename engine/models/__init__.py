"""The model side: files, their checks and where they come from. May import engine.core only.

gguf_inspect     what a GGUF file holds, from its header and tensor index only
gguf_check       a structural check of a GGUF file before llama.cpp is asked to load it
compat           llama.cpp's draft/target vocabulary rule, in Python
draft_heads      which speculative types a target/draft pair can run, and why not
chat_mode        chat or raw text: how a target's prompts run when the user does not say
tensor_layout    each architecture's tensors, names and shapes, from its numbers; parameter counts
catalog          model families, GGUF files, draft pairings and presets (resources/catalog/)
library          the GGUF files already on this machine, and which of them pair up
downloads        hub downloads: progress, resume, sha256, free-disk check, cancel
demo_models      the shipped demo model family
synthetic        small generated target/draft pairs, written offline in seconds (the CPU probe writes with it)
"""
