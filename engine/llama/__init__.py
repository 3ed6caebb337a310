"""The pinned llama.cpp as an installed program: finding its install and sources (install), loading
ggml's backend modules from it into this process and saying which loaded (backends), running
llama-server on 127.0.0.1 (server), and reading the flag dialect of any llama-server's --help (dialect).

May import engine.models and engine.core.
"""
