"""llama-server command lines for a set of tuned settings.

This is the current flag dialect of the pinned llama.cpp (after the b8955
rename and the b9131 type names; see LLAMA_CPP_FACTS.md). The argv is built as
a list (for launching) and quoted for a shell only when shown to a person.
Dialect detection from a binary's --help and PowerShell/cmd quoting belong to
the export issue and extend this module.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from engine.settings import LoadSettings, SamplingSettings, SpecSettings

# llama.cpp's defaults: flags equal to these are left out of the command
_SPEC_DEFAULTS = SpecSettings()
_NGRAM_FLAGS = {"ngram-simple": "simple", "ngram-map-k": "map-k", "ngram-map-k4v": "map-k4v"}


def llama_server_argv(load: LoadSettings, spec: SpecSettings, sampling: SamplingSettings | None = None,
                      server: str | Path = "llama-server", *, host: str | None = None, port: int | None = None,
                      extra: list[str] | None = None) -> list[str]:
    """The argv that makes llama-server speculate as ``spec`` does in the lab."""
    argv = [str(server), "-m", str(load.target), "-c", str(load.ctx), "-np", "1"]
    if load.ngl != -1:
        argv += ["-ngl", str(load.ngl)]
    if load.threads > 0:
        argv += ["-t", str(load.threads)]
    if load.threads_batch > 0:
        argv += ["-tb", str(load.threads_batch)]
    types = spec.types
    if types:
        argv += ["--spec-type", ",".join(types)]
    if load.draft is not None and "draft-simple" in types:
        argv += ["-md", str(load.draft)]
        if load.ngl_draft != -1:
            argv += ["-ngld", str(load.ngl_draft)]
    uses_draft_knobs = any(t.startswith("draft-") for t in types)
    if uses_draft_knobs:
        argv += ["--spec-draft-n-max", str(spec.draft_n_max)]
        if spec.draft_n_min != _SPEC_DEFAULTS.draft_n_min:
            argv += ["--spec-draft-n-min", str(spec.draft_n_min)]
        if spec.draft_p_min != _SPEC_DEFAULTS.draft_p_min:
            argv += ["--spec-draft-p-min", f"{spec.draft_p_min:g}"]
    for t in types:
        if t in _NGRAM_FLAGS:
            name = _NGRAM_FLAGS[t]
            argv += [f"--spec-ngram-{name}-size-n", str(spec.ngram_size_n),
                     f"--spec-ngram-{name}-size-m", str(spec.ngram_size_m),
                     f"--spec-ngram-{name}-min-hits", str(spec.ngram_min_hits)]
        elif t == "ngram-mod":
            argv += ["--spec-ngram-mod-n-match", str(spec.ngram_mod_n_match),
                     "--spec-ngram-mod-n-min", str(spec.ngram_mod_n_min),
                     "--spec-ngram-mod-n-max", str(spec.ngram_mod_n_max)]
    if sampling is not None:
        argv += ["--temp", f"{sampling.temp:g}", "--top-k", str(sampling.top_k), "--top-p", f"{sampling.top_p:g}",
                 "--min-p", f"{sampling.min_p:g}"]
    if host is not None:
        argv += ["--host", host]
    if port is not None:
        argv += ["--port", str(port)]
    return argv + list(extra or [])


def bash_command(argv: list[str]) -> str:
    return shlex.join(argv)
