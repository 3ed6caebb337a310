# Included after llama.cpp's project() (CMAKE_PROJECT_INCLUDE) in the mingw-w64 cross-build:
# DLLs named as an MSVC build names them (llama.dll, llama-common.dll, mtmd.dll), not libllama.dll,
# so the cross-built folder has the file names of a Windows build of the wheel. ggml's own
# CMakeLists already does this for ggml*.dll.
set(CMAKE_SHARED_LIBRARY_PREFIX "")
set(CMAKE_SHARED_MODULE_PREFIX "")
