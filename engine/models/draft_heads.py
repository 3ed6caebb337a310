"""Which of llama.cpp's speculative types a target/draft pair can run, and why not, in one sentence.

The draft-model types each need their own kind of file (common/speculative.cpp of the pinned llama.cpp):

  draft-simple   a separate, ordinary model (same vocabulary: engine.models.compat)
  draft-eagle3   an EAGLE-3 draft file (general.architecture "eagle3", tensors fc / d2t)
  draft-dflash   a DFlash draft file (general.architecture "dflash")
  draft-dspark   a DFlash file with the DSpark Markov head (markov_w1 / markov_w2 / conf_proj)
  draft-mtp      the target's own next-n (MTP) block, for the architectures whose llama.cpp graph has one;
                 or, for a gemma4 target, Gemma 4's separate assistant file (general.architecture
                 "gemma4-assistant"), loaded as the draft model (`-md FILE --spec-type draft-mtp`)

llama.cpp does not check this up front. Seen with the pinned build and an ordinary draft model: draft-dflash
aborts the process (GGML_ASSERT: the model has no target layers), draft-eagle3 fails once the generation
starts ("draft model is not eagle3"), and draft-mtp runs its drafter on the draft model's context, which is
no MTP head, so whatever it measures means nothing. So every place that sends a method to the engine (the
Lab, the worker, ``spectune run`` / ``tune``) asks this module first. The n-gram types draft from the text
alone: every pair runs them.

A head is also made for one target: an EAGLE-3 or DFlash file reads the hidden states of given target
layers (``<arch>.target_layers``) of a given width, and llama.cpp aborts when the target has no such
layer. The verdicts are for SpecTune's engine (native/specrt), which the Lab, the tuner and ``spectune
run`` use: it makes the MTP context of a target's own head only when no separate draft model is loaded (as
llama-server does for ``--spec-type draft-mtp`` without ``-md``), so draft-mtp on such a target needs the draft
slot empty; a gemma4 target drafts with draft-mtp through its assistant file in the draft slot instead. The
assistant's layers compute queries only and read the target's KV cache (src/models/gemma4-assistant.cpp), so
it pairs only with a gemma4 target as wide as its ``embedding_length_out``. A type the pinned
llama.cpp runs and the engine cannot would be listed in NOT_IN_ENGINE; none is today.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from engine.core.settings import SPEC_TYPES, parse_spec_types

if TYPE_CHECKING:
    from engine.models.gguf_inspect import ModelInfo

# general.architecture values whose llama.cpp graph builds an MTP draft head (LLM_GRAPH_TYPE_DECODER_MTP):
# read from src/models/*.cpp of llama.cpp 0c1e570 (llama-cpp-python 0.3.36). Other architectures may keep
# nextn tensors in their files (glm4, dots3note, nemotron_h, bailingmoe2, exaone4, ...) but skip them at load.
MTP_ARCHITECTURES = frozenset(
    {
        "bailingmoe3",
        "cohere2moe",
        "deepseek2",
        "deepseek32",
        "deepseek4",
        "glm-dsa",
        "glm4moe",
        "glm5-next",
        "hy_v3",
        "mimo2",
        "nemotron_h_moe",
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "step35",
    }
)

# general.architecture of the separate draft-head files (src/llama-arch.cpp: LLM_ARCH_EAGLE3, LLM_ARCH_DFLASH,
# LLM_ARCH_GEMMA4_ASSISTANT)
HEAD_ARCHITECTURES = frozenset({"eagle3", "dflash", "gemma4-assistant"})
# a separate draft head (engine.models.gguf_inspect's speculative_role) -> its method and its name
HEAD_METHODS = {
    "eagle3": "draft-eagle3",
    "dflash": "draft-dflash",
    "dspark": "draft-dspark",
    "gemma4-assistant": "draft-mtp",
}
HEAD_NAMES = {
    "eagle3": "EAGLE-3 draft",
    "dflash": "DFlash draft",
    "dspark": "DSpark draft",
    "gemma4-assistant": "Gemma 4 assistant draft",
}
# the target architecture a gemma4-assistant file drafts for
ASSISTANT_TARGET_ARCH = "gemma4"

# Types the pinned llama.cpp has that SpecTune's engine cannot run yet, even with the right file, each with why:
# an export may still use them (MethodVerdict.only_here). Empty since specrt loads a DFlash / DSpark draft with
# its own type (an output per block position); tests/test_draft_heads.py checks both against llama-server.
NOT_IN_ENGINE: dict[str, str] = {}


class HeadFacts(Protocol):
    """What this module reads of a model: a ModelInfo (engine.models.gguf_inspect) or a library entry."""

    @property
    def architecture(self) -> str | None: ...

    @property
    def speculative_role(self) -> str | None: ...


@dataclass(frozen=True)
class MethodVerdict:
    method: str
    runs: bool
    reason: str = ""  # why not, in one sentence a user can act on; empty when it runs

    @property
    def only_here(self) -> bool:
        """Refused only because SpecTune's engine cannot run it yet (NOT_IN_ENGINE): llama-server can, so an
        exported command may still use it."""
        return not self.runs and self.reason == NOT_IN_ENGINE.get(self.method)


def suggested_method(has_draft: bool, verdicts: Mapping[str, MethodVerdict]) -> str:
    """What a pair should draft with when nobody says: draft-simple with a draft model, the file's own method
    with a draft head (EAGLE-3, DFlash, a Gemma 4 assistant); without a draft, draft-mtp on a target with an
    MTP head (Qwen3.5, GLM-4.5), else ngram-mod."""
    if not has_draft:
        return "draft-mtp" if verdicts["draft-mtp"].runs else "ngram-mod"
    return next((m for m in ("draft-simple", *HEAD_METHODS.values()) if verdicts[m].runs), "draft-simple")


def is_head(model: HeadFacts | None) -> bool:
    """A separate draft head (EAGLE-3, DFlash, DSpark): it drafts only through its own method, never as a model."""
    return model is not None and model.speculative_role in HEAD_METHODS


def has_mtp_head(model: HeadFacts | None) -> bool:
    """A model whose MTP head the pinned llama.cpp can draft with (draft-mtp, no separate draft)."""
    return model is not None and model.speculative_role == "mtp" and model.architecture in MTP_ARCHITECTURES


def kind_label(model: HeadFacts) -> str | None:
    """How the library and the Models page name a file that is not a plain model; None for a plain one."""
    role = model.speculative_role
    if role == "gemma4-assistant":
        return f"{HEAD_NAMES[role]} (pairs only with its gemma4 target; speculates with draft-mtp)"
    if role in HEAD_NAMES:
        return f"{HEAD_NAMES[role]} (speculates only with {HEAD_METHODS[role]})"
    if role == "mtp":
        if has_mtp_head(model):
            return "has an MTP head — no separate draft needed (draft-mtp)"
        return f"has MTP layers, but the pinned llama.cpp does not run draft-mtp for {model.architecture}"
    return None


def _named(role: str) -> str:
    """ "an EAGLE-3 draft", "a DFlash draft": a head's name with its article."""
    return ("an " if role == "eagle3" else "a ") + HEAD_NAMES[role]


def _what(model: HeadFacts) -> str:
    role = model.speculative_role
    return _named(role) if role in HEAD_NAMES else "an ordinary model"


def target_refusal(target: HeadFacts) -> str:
    """Why this file cannot be a target (a draft head generates nothing alone); empty when it can."""
    if not is_head(target):
        return ""
    return (
        f"the target is {_what(target)}, which only drafts for another model; "
        "choose the model it was made for as the target"
    )


def _why_not(method: str, target: ModelInfo, draft: ModelInfo | None) -> str:
    """Why ``method`` cannot run on this pair; empty when it can."""
    refusal = target_refusal(target)
    if refusal:
        return refusal
    if method.startswith("ngram-"):
        return ""
    if method == "draft-simple":
        if draft is None:
            return "draft-simple needs a draft model"
        if is_head(draft):
            own = HEAD_METHODS[draft.speculative_role or ""]
            return f"draft-simple needs an ordinary draft model; the draft is {_what(draft)} (use {own})"
        return ""
    if method == "draft-mtp":
        return _why_not_mtp(target, draft)
    role = next((r for r, m in HEAD_METHODS.items() if m == method and r != "gemma4-assistant"), None)
    if role is None:
        raise ValueError(f"unknown speculative type {method!r}")
    if draft is None:
        return f"{method} needs {_named(role)} file; no draft model is chosen"
    if draft.speculative_role != role:
        return f"{method} needs {_named(role)} file; the draft is {_what(draft)}"
    return _head_misfit(role, target, draft) or NOT_IN_ENGINE.get(method, "")


def _head_misfit(role: str, target: ModelInfo, draft: ModelInfo) -> str:
    """Why this head was not made for this target (llama.cpp would abort); empty when it fits.

    EAGLE-3 (src/models/eagle3.cpp, common_speculative_impl_draft_eagle3) reads target layers up to and
    including n_layer (the last one through the next-n embeddings) of width <arch>.target_hidden_size;
    DFlash reads layer inputs below n_layer, as wide as its own hidden size."""
    name = HEAD_NAMES[role]
    n_layer = (target.block_count or 0) - target.nextn_layers  # llama_model_n_layer: the trunk
    width = draft.arch_value("target_hidden_size") if role == "eagle3" else draft.n_embd
    if isinstance(width, int) and target.n_embd and width != target.n_embd:
        return f"this {name} was made for a target {width} wide; this target is {target.n_embd} wide"
    layers = draft.arch_value("target_layers")
    deepest = max((x for x in layers if isinstance(x, int)), default=-1) if isinstance(layers, list) else -1
    last = n_layer if role == "eagle3" else n_layer - 1
    if deepest > last:
        return f"this {name} reads the target's layer {deepest}; this target has {n_layer} layers"
    return ""


def _assistant_misfit(target: ModelInfo, draft: ModelInfo) -> str:
    """Why this gemma4-assistant file cannot draft for this target; empty when it can.

    llama.cpp (src/models/gemma4-assistant.cpp, common_speculative_impl_draft_mtp) gathers the target's token
    embeddings, asserts that its input rows are as wide as the target's hidden state, and lets its sliding and
    global layers read the target's layers n_layer - 2 and n_layer - 1."""
    if target.architecture != ASSISTANT_TARGET_ARCH:
        return (
            f"a {HEAD_NAMES['gemma4-assistant']} drafts only for the gemma4 model it was made for; "
            f"this target is {target.architecture or 'of no known architecture'}"
        )
    width = draft.arch_value("embedding_length_out")
    if isinstance(width, int) and target.n_embd and width != target.n_embd:
        return (
            f"this {HEAD_NAMES['gemma4-assistant']} was made for a gemma4 target {width} wide; "
            f"this target is {target.n_embd} wide"
        )
    return ""


def _why_not_mtp(target: ModelInfo, draft: ModelInfo | None) -> str:
    if draft is not None and draft.speculative_role == "gemma4-assistant":
        return _assistant_misfit(target, draft)
    if target.architecture == ASSISTANT_TARGET_ARCH and target.speculative_role != "mtp":
        return "draft-mtp on a gemma4 target needs its Gemma 4 assistant file as the draft model" + (
            f"; the draft is {_what(draft)}" if draft is not None else ""
        )
    if target.speculative_role != "mtp":
        return "draft-mtp needs a target with an MTP head; this model has none"
    arch = target.architecture
    if arch not in MTP_ARCHITECTURES:
        return (
            "draft-mtp needs an MTP head of an architecture the pinned llama.cpp runs it for "
            f"({', '.join(sorted(MTP_ARCHITECTURES))}); this model is {arch or 'of no known architecture'}"
        )
    if draft is not None:
        return (
            "draft-mtp drafts with the target's own MTP head, which SpecTune uses only without a draft model; "
            "clear the draft"
        )
    return ""


def method_verdicts(target: ModelInfo | None, draft: ModelInfo | None) -> dict[str, MethodVerdict]:
    """For every speculative type llama.cpp knows (engine.core.settings.SPEC_TYPES), whether this pair can
    run it and, if not, why. No target (nothing chosen yet): every type counts as runnable, since nothing
    can be said about it."""
    out = {}
    for method in SPEC_TYPES:
        reason = _why_not(method, target, draft) if target is not None else ""
        out[method] = MethodVerdict(method, not reason, reason)
    return out


def unavailable(verdicts: Mapping[str, MethodVerdict], *, export: bool = False) -> dict[str, str]:
    """method -> reason, for the methods the pair cannot run: what SpecSettings.validate(unavailable=) takes.
    export: for an exported command (llama-server, vLLM, SGLang), not SpecTune's engine: what only the
    engine lacks is left out."""
    return {m: v.reason for m, v in verdicts.items() if not v.runs and not (export and v.only_here)}


def spec_type_reason(spec_type: str, verdicts: Mapping[str, MethodVerdict]) -> str:
    """Why a setting such as "ngram-mod,draft-simple" cannot run (its first type that cannot); empty when it can.
    An unknown type name is SettingsError, as everywhere."""
    for method in parse_spec_types(spec_type):
        verdict = verdicts.get(method)
        if verdict is not None and not verdict.runs:
            return verdict.reason
    return ""


def pair_verdicts(target: str | Path | None, draft: str | Path | None) -> dict[str, MethodVerdict]:
    """method_verdicts of two files, read from their headers. A file that cannot be read says nothing
    about methods (the load refuses it with its own message): every type counts as runnable then."""
    from engine.models.gguf_inspect import GGUFInspectError, inspect_gguf

    try:
        t = inspect_gguf(target) if target is not None else None
        d = inspect_gguf(draft) if draft is not None else None
    except (GGUFInspectError, OSError):
        return method_verdicts(None, None)
    return method_verdicts(t, d)
