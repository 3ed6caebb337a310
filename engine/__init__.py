"""SpecTune's engine: everything but the GUI, in pure Python (no Qt), importable without a GPU.

Packages by concern, each importing only those listed below it (import-linter's
``layers`` contract in pyproject.toml enforces the order):

  cli/       the ``spectune`` command: argument parsing and printing only
  serve/     the tuned settings served behind a local proxy, each request of the user's traffic watched
  measure/   live sessions, generation, the tuner, validation against llama-server, the history
  deploy/    llama-server command lines in the binary's dialect, shell quoting, vLLM / SGLang
  planning/  hardware, memory plan, fit and preflight, recommendations, the cost model
  runtime/   the engine worker process, its protocol and client, the ctypes binding, the native build
  llama/     the pinned llama.cpp install, running llama-server, reading its --help
  models/    GGUF reading and checks, vocabulary compatibility, catalog, library, downloads, the probe's models
  core/      settings, the run counter, workloads, paths: what every layer shares

The models the tests and benchmarks run on are generated and fetched by the top-level testmodels package.
"""
