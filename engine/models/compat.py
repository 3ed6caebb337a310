"""Can this draft speculate for this target? llama.cpp's own rule, in Python.

The rule is common_speculative_are_compatible() in the pinned llama.cpp's
common/speculative.cpp, checked in its order:

  1. the vocab types are equal (llama_vocab_type);
  2. add-BOS is equal, and when BOS is added, the BOS ids are equal;
  3. add-EOS is equal, and when EOS is added, the EOS ids are equal;
  4. the vocab sizes differ by at most SPEC_VOCAB_MAX_SIZE_DIFFERENCE (128);
  5. every token id from SPEC_VOCAB_CHECK_START_TOKEN_ID (5) up to the smaller
     vocab has the same text in both.

llama.cpp stops at the first failure; this module checks every rule, so the
user learns all that is wrong at once, and the verdict is the same.
The values compared are the ones llama.cpp resolves at load (see
engine.models.gguf_inspect.vocab_info), not the raw keys.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.models.gguf_inspect import ModelInfo, VocabInfo, inspect_gguf

SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5
MAX_LISTED_TOKEN_DIFFERENCES = 3


def _token_repr(text: bytes) -> str:
    return repr(text.decode("utf-8", errors="replace"))


def _flag(value: bool) -> str:
    return "on" if value else "off"


def vocab_compatibility(target: VocabInfo, draft: VocabInfo) -> dict:
    """{"compatible": bool, "reasons": [every failed rule in words]}."""
    reasons: list[str] = []
    for role, vocab in (("target", target), ("draft", draft)):
        if vocab.load_error:
            reasons.append(f"the {role} vocabulary cannot be loaded by llama.cpp: {vocab.load_error}")
    if reasons:
        return {"compatible": False, "reasons": reasons}

    if target.vocab_type != draft.vocab_type:
        reasons.append(
            f"vocab type differs: target {target.vocab_type} ({target.tokenizer_model}), "
            f"draft {draft.vocab_type} ({draft.tokenizer_model})"
        )
    if target.add_bos != draft.add_bos:
        reasons.append(f"add-BOS differs: target {_flag(target.add_bos)}, draft {_flag(draft.add_bos)}")
    elif target.add_bos and target.bos_id != draft.bos_id:
        reasons.append(f"BOS token id differs: target {target.bos_id}, draft {draft.bos_id}")
    if target.add_eos != draft.add_eos:
        reasons.append(f"add-EOS differs: target {_flag(target.add_eos)}, draft {_flag(draft.add_eos)}")
    elif target.add_eos and target.eos_id != draft.eos_id:
        reasons.append(f"EOS token id differs: target {target.eos_id}, draft {draft.eos_id}")

    size_diff = abs(target.n_tokens - draft.n_tokens)
    if size_diff > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        reasons.append(
            f"vocab sizes differ by {size_diff} (target {target.n_tokens}, draft {draft.n_tokens}); "
            f"llama.cpp allows at most {SPEC_VOCAB_MAX_SIZE_DIFFERENCE}"
        )

    differing: list[str] = []
    total_differing = 0
    start, common = SPEC_VOCAB_CHECK_START_TOKEN_ID, min(target.n_tokens, draft.n_tokens)
    # the usual same-family pair holds the same token list: one comparison in C says so, where the loop below
    # takes about 100 ms over a 151936-token vocabulary (and holds the GIL the GUI thread needs)
    same = target.tokens[start:common] == draft.tokens[start:common] and len(target.tokens) >= common
    for token_id in range(start, start if same else common):
        a, b = target.token_text(token_id), draft.token_text(token_id)
        # strcmp: the text ends at the first NUL byte
        if a.split(b"\x00", 1)[0] != b.split(b"\x00", 1)[0]:
            total_differing += 1
            if len(differing) < MAX_LISTED_TOKEN_DIFFERENCES:
                differing.append(f"{token_id} (target {_token_repr(a)}, draft {_token_repr(b)})")
    if total_differing:
        more = f" and {total_differing - len(differing)} more" if total_differing > len(differing) else ""
        reasons.append(
            f"token text differs for {total_differing} of the ids from "
            f"{SPEC_VOCAB_CHECK_START_TOKEN_ID} upward: {', '.join(differing)}{more}"
        )
    return {"compatible": not reasons, "reasons": reasons}


def check_pair(target: str | Path | ModelInfo, draft: str | Path | ModelInfo) -> dict:
    """Compatibility of two GGUF files (paths or already inspected)."""
    t = target if isinstance(target, ModelInfo) else inspect_gguf(target)
    d = draft if isinstance(draft, ModelInfo) else inspect_gguf(draft)
    return vocab_compatibility(t.vocab, d.vocab)


if __name__ == "__main__":  # python -m engine.models.compat TARGET DRAFT
    if len(sys.argv) != 3:
        sys.exit("usage: python -m engine.models.compat TARGET DRAFT")
    print(json.dumps(check_pair(sys.argv[1], sys.argv[2])))
