"""The pinned llama.cpp as an installed program. May import engine.models and engine.core.

install   where the pinned llama.cpp and its sources live on this machine
backends  loading ggml's backend modules from the install, and which of them loaded
server    running llama-server on 127.0.0.1 for a measurement, and talking to it over HTTP
child_process  starting a llama-server that dies with SpecTune, however SpecTune ends
dialect   which flag dialect a llama-server binary speaks, read from its --help
devices   what a llama-server binary says it is and runs on (--version, --list-devices)
quantize  the pinned build's llama-quantize, for files SpecTune makes itself
"""
