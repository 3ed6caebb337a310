"""What every Lab knob does, which llama-server flag it becomes, and that flag's default in the pinned
llama.cpp build: one table, so the tooltips and their test read the same words.

The defaults are llama-server's own (what `llama-server --help` of the pinned build prints, and
engine.core.settings.SpecSettings follows for the speculation knobs). Where the Lab starts from another
value on purpose, the sentence says so: the Lab measures at temperature 0, where speculation is exact,
and starts with draft-simple, since a draft model is what it is there to tune.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.settings import SamplingSettings, SpecSettings

_SPEC = SpecSettings()


@dataclass(frozen=True)
class KnobHelp:
    flag: str  # the llama-server flag in the current dialect (engine.llama.dialect.CURRENT)
    default: str  # llama-server's default in the pinned build, as its --help prints it
    sentence: str  # what the knob does, one sentence
    stated: bool = True  # False: --help states no default for the flag; `default` is what llama.cpp then does

    def tooltip(self) -> str:
        where = "default in the pinned build" if self.stated else "without the flag"
        return f"{self.sentence}\nllama-server flag: {self.flag} · {where}: {self.default}"


# keyed by the LabControls attribute that holds the widget
KNOB_HELP: dict[str, KnobHelp] = {
    "method": KnobHelp(
        "--spec-type",
        "none",
        "How drafts are made: a draft model (draft-simple), a draft head (draft-eagle3, draft-dflash, "
        "draft-dspark: a file of that kind as the draft; draft-mtp: the target's own MTP head) or n-gram lookups "
        "in the text so far (ngram-*); several types separated by commas draft in turn. Greyed out: what this "
        "pair cannot run (the entry's tooltip says why).",
    ),
    "k": KnobHelp(
        "--spec-draft-n-max",
        str(_SPEC.draft_n_max),
        "K: the most tokens the draft proposes per step; more pays when the target accepts long runs.",
    ),
    "n_min": KnobHelp(
        "--spec-draft-n-min",
        str(_SPEC.draft_n_min),
        "The fewest tokens a draft step proposes, even when p-min would stop it earlier.",
    ),
    "p_min": KnobHelp(
        "--spec-draft-p-min",
        f"{_SPEC.draft_p_min:.2f}",
        "The draft stops proposing once its own probability for the next token drops below this.",
    ),
    "size_n": KnobHelp(
        "--spec-ngram-simple-size-n",
        str(_SPEC.ngram_size_n),
        "How many recent tokens the n-gram types (simple, map-k, map-k4v) look up in the text so far.",
    ),
    "size_m": KnobHelp(
        "--spec-ngram-simple-size-m",
        str(_SPEC.ngram_size_m),
        "How many tokens an n-gram match proposes as the draft.",
    ),
    "min_hits": KnobHelp(
        "--spec-ngram-simple-min-hits",
        str(_SPEC.ngram_min_hits),
        "How often an n-gram must have been seen before it is proposed.",
    ),
    "mod_match": KnobHelp(
        "--spec-ngram-mod-n-match",
        str(_SPEC.ngram_mod_n_match),
        "How many recent tokens ngram-mod hashes to find an earlier occurrence.",
    ),
    "mod_min": KnobHelp(
        "--spec-ngram-mod-n-min",
        str(_SPEC.ngram_mod_n_min),
        "The fewest tokens ngram-mod proposes when it finds a match.",
    ),
    "mod_max": KnobHelp(
        "--spec-ngram-mod-n-max",
        str(_SPEC.ngram_mod_n_max),
        "The most tokens ngram-mod proposes when it finds a match.",
    ),
    "temp": KnobHelp(
        "--temp",
        "0.80",
        f"Sampling temperature; 0 is greedy, where speculation gives exactly the target's text "
        f"(the Lab starts at {SamplingSettings().temp:g}).",
    ),
    "top_k": KnobHelp("--top-k", str(SamplingSettings().top_k), "Sample only from the k likeliest tokens (0: all)."),
    "top_p": KnobHelp(
        "--top-p",
        f"{SamplingSettings().top_p:.2f}",
        "Sample only from the likeliest tokens that together reach this probability.",
    ),
    "seed": KnobHelp("--seed", "-1", "The random seed for sampling; -1 picks a new one each run."),
    "ctx": KnobHelp(
        "-c",
        "0",
        "Context size in tokens of the target; the draft's KV cache gets the same (llama-server's 0: the model's).",
    ),
    "ngl": KnobHelp(
        "-ngl",
        "auto",
        "How many of the target's layers go to the GPU; -1 lets llama.cpp decide (its auto).",
    ),
    "target_on": KnobHelp(
        "-dev",
        "every GPU",
        "The GPUs the target's layers are split over, by their free memory: every GPU (llama.cpp's default) "
        "or one of them, e.g. the big card while the draft has the small one.",
        stated=False,
    ),
    "draft_on": KnobHelp(
        "-devd",
        "the target's GPUs",
        "Where the draft's layers go: the target's GPUs (llama.cpp's default), one GPU of its own, or the CPU "
        "(written as -ngld 0), which leaves every GPU byte to the target.",
        stated=False,
    ),
    "n_cpu_moe": KnobHelp(
        "-ncmoe",
        "none",
        "MoE targets: the expert weights of the first N layers stay in RAM and run on the CPU, so that a model "
        "too big for the GPU fits; each token reads only a few experts, so this costs less than moving layers.",
        stated=False,
    ),
    "threads": KnobHelp(
        "-t",
        "-1",
        "CPU threads for generation; 0 here (llama-server's -1) lets llama.cpp choose.",
    ),
    "repack": KnobHelp(
        "-nr",
        "enabled",
        "Repack the weights into this CPU's fastest layout (AMX / AVX-512); unticked exports -nr "
        "(--no-repack), and SpecTune unticks it itself when loading dies of an illegal instruction.",
    ),
}


def knob_tooltip(name: str) -> str:
    return KNOB_HELP[name].tooltip()
