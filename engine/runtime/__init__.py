"""The engine runtime: the worker process that loads the native specrt library (worker, binding),
its JSON-lines protocol (protocol), the client every caller uses (client), and building native/
against the pinned llama.cpp (native_build).

Only the worker loads the native library; the GUI talks to it through the client. May import
engine.llama, engine.models and engine.core.
"""
