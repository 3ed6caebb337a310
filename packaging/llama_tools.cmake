# Leaves out the llama.cpp tools SpecTune never runs, so a source install compiles less.
#
# scripts/setup.sh passes this file as CMAKE_PROJECT_INCLUDE when it builds the pinned llama-cpp-python.
# llama.cpp's tools/CMakeLists.txt adds every tool once LLAMA_BUILD_TOOLS is on, with no option per tool,
# and SpecTune runs only llama-server (validation, serving, the export check) and llama-quantize (the
# models the CPU probe quantizes). Leaving the others out (llama-bench, llama-cli, perplexity, imatrix,
# tts, ...) took the native build from 11.2 to 9.7 CPU-minutes, 346 s to 295 s on 2 cores, and the wheel
# from 22.2 to 21.3 MB (bench/results/llama_wheel-native.txt).
#
# How: add_subdirectory is wrapped while llama.cpp's tools/ folder is read, and the listed folders are
# skipped; the server's own dependencies (mtmd, ui) and every library are built as before. The list
# names what is skipped rather than what is kept, so that a tool a newer llama.cpp needs for the server
# is built by default; tests/test_packaging.py checks the list against the pinned source and the install.

include_guard(GLOBAL)  # CMAKE_PROJECT_INCLUDE runs after every project() call; wrap add_subdirectory once

set(SPECTUNE_SKIPPED_LLAMA_TOOLS
    batched-bench cli completion cvector-generator export-lora fit-params gguf-split imatrix llama-bench
    perplexity results rpc tokenize tts)

# A macro, not a function: a subdirectory's set(... PARENT_SCOPE) must reach the calling folder's scope.
macro(add_subdirectory _spectune_dir)
    if(CMAKE_CURRENT_SOURCE_DIR MATCHES "/tools$" AND "${_spectune_dir}" IN_LIST SPECTUNE_SKIPPED_LLAMA_TOOLS)
        message(STATUS "SpecTune: llama.cpp tool ${_spectune_dir} left out (packaging/llama_tools.cmake)")
    else()
        _add_subdirectory(${ARGV})
    endif()
endmacro()
