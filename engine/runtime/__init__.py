"""The engine runtime. Only the worker loads the native library; the GUI talks to it through the client.
May import engine.llama, engine.models and engine.core.

  worker        the engine worker process (``python -m engine.runtime.worker``)
  binding       the ctypes binding of native/include/specrt.h
  protocol      the worker's wire protocol: JSON objects, one per line
  events        the worker's events as TypedDicts, for the worker that writes them and every reader
  client        starts the worker and talks to it; survives its death
  engine_choice  which engine measures (native, llama-server, auto) and a native start failure in words
  native_build  builds native/ (libspecrt) against the installed llama.cpp, once per key
"""
