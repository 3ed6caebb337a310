"""The speculative settings SpecTune measures on a pair, in one place.

Four modules used to keep four lists, and the concurrency tune ran ngram-mod at llama.cpp's defaults where the
rest used the sizes below (issue 50). Every measurement now draws on the same kinds: draft-simple at a few K,
the two n-gram lookups at one set of sizes, and an n-gram with the draft model behind it. What differs is how
many settings a measurement can afford:

QUICK            the quick check and ``spectune demo``: four settings in paired rounds, about a minute
tuner_extras     what the tuner measures beside the K its cost model ranks best
NGRAMS           the n-gram lookups every tune measures (they need no draft model)
concurrent       what the concurrency tune measures at N clients
"""

from __future__ import annotations

from dataclasses import replace

from engine.core.settings import SpecSettings

# the sizes the short measurements use: a match of 8 tokens finds repeats in a few hundred tokens of text,
# where llama.cpp's defaults (24, 48, 64) are made for long sessions
NGRAM_SIMPLE = SpecSettings("ngram-simple", ngram_size_n=3, ngram_size_m=8)
NGRAM_MOD = SpecSettings("ngram-mod", ngram_mod_n_match=8, ngram_mod_n_min=2, ngram_mod_n_max=16)
NGRAMS = (NGRAM_SIMPLE, NGRAM_MOD)


def draft_simple(k: int, **knobs: float) -> SpecSettings:
    """draft-simple at K = k, with any other knob (draft_p_min, ...)."""
    return SpecSettings("draft-simple", draft_n_max=k, **knobs)  # type: ignore[arg-type]


def with_draft(ngram: SpecSettings, k: int) -> SpecSettings:
    """The n-gram first, the draft model where it finds nothing, at K = k."""
    return replace(ngram, spec_type=f"{ngram.spec_type},draft-simple", draft_n_max=k)


# what can pay with a small draft model on a small machine: short drafts, an n-gram lookup that costs next to
# nothing, and the two together
QUICK = (draft_simple(2), draft_simple(4), NGRAM_MOD, with_draft(NGRAM_MOD, 2))


def tuner_extras(best_k: int) -> list[SpecSettings]:
    """Beside draft-simple at the K the cost model ranks best: the same K that stops drafting at low
    confidence, and ngram-simple in front of it."""
    return [draft_simple(best_k, draft_p_min=0.5), with_draft(NGRAM_SIMPLE, best_k)]


def concurrent(ks: list[int]) -> list[SpecSettings]:
    """The concurrency tune's settings: draft-simple at each K in ks (none without a draft model) and ngram-mod."""
    return [*(draft_simple(k) for k in ks), NGRAM_MOD]
