# CMake toolchain for cross-building llama.cpp and native/ (specrt) for 64-bit Windows on Debian
# with mingw-w64 (apt-get install mingw-w64). The posix-threads variant of the compilers is used:
# GCC 12's win32-threads variant has no std::thread / std::mutex, which llama.cpp needs.
# Used by packaging/wine_check.sh; the programs it builds run under Wine (apt-get install wine64).
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(_triple x86_64-w64-mingw32)
set(CMAKE_C_COMPILER ${_triple}-gcc-posix)
set(CMAKE_CXX_COMPILER ${_triple}-g++-posix)
set(CMAKE_RC_COMPILER ${_triple}-windres)
set(CMAKE_FIND_ROOT_PATH /usr/${_triple})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
