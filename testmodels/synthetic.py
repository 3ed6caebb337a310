"""``python -m testmodels.synthetic OUT [options]``: writes a small generated target/draft pair into OUT and prints
its paths as JSON. The options pick the variant (MoE, gemma3's sliding window, Qwen3.5's hybrid layers and MTP
block, Gemma 4, a chat template); engine.models.synthetic, the writer itself, says what each one writes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from engine.models import synthetic
from engine.models.synthetic import (
    CHATML_TEMPLATE,
    GEMMA4_LAYERS,
    GEMMA4_WINDOW,
    HYBRID_LAYERS,
    ModelShape,
    PairSpec,
    write_pair,
)


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    a = p.parse_args(argv)
    shape, draft_layers = _shape(p, a)
    template = _chat_template(p, a)
    spec = PairSpec(shape, draft_layers, a.divergence, a.seed, a.dtype, chat_template=template, mtp=a.mtp)
    try:
        target, draft = write_pair(a.out_dir, spec)
    except ValueError as exc:
        p.error(str(exc))
    json.dump({"target": str(target), "draft": str(draft), "spec": dataclasses.asdict(spec)}, sys.stdout)
    print()
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m testmodels.synthetic", description=synthetic.__doc__.splitlines()[0])
    p.add_argument("out_dir")
    p.add_argument("--n-embd", type=int, default=ModelShape.n_embd)
    p.add_argument(
        "--n-layer",
        type=int,
        help=f"default {ModelShape.n_layer} ({HYBRID_LAYERS[0]} with --hybrid, {GEMMA4_LAYERS[0]} with --gemma4)",
    )
    p.add_argument("--n-head", type=int, default=ModelShape.n_head)
    p.add_argument("--n-head-kv", type=int, default=ModelShape.n_head_kv)
    p.add_argument("--n-ff", type=int, default=ModelShape.n_ff)
    p.add_argument(
        "--draft-layers",
        type=int,
        help=f"default {PairSpec.draft_layers} ({HYBRID_LAYERS[1]} with --hybrid, {GEMMA4_LAYERS[1]} with --gemma4)",
    )
    p.add_argument("--divergence", type=float, default=PairSpec.divergence)
    p.add_argument("--dtype", choices=["f32", "f16", "q8_0"], default="f32")
    p.add_argument("--seed", type=int, default=PairSpec.seed)
    p.add_argument("--n-expert", type=int, default=0, help="experts per layer: an MoE pair (qwen3moe)")
    p.add_argument("--n-expert-used", type=int, default=2, help="experts active per token (with --n-expert)")
    p.add_argument("--n-ff-exp", type=int, default=0, help="rows of each expert's FFN (default n_ff / used)")
    p.add_argument(
        "--sliding-window",
        type=int,
        default=0,
        help="tokens: a gemma3 pair whose layers slide over this window, five of every six",
    )
    p.add_argument(
        "--hybrid",
        action="store_true",
        help="a qwen35 pair: gated delta-net layers with a recurrent state, full attention every fourth "
        "(qwen35moe with --n-expert)",
    )
    p.add_argument(
        "--gemma4",
        action="store_true",
        help=f"a gemma4 pair: five of every six layers slide (window --sliding-window, default {GEMMA4_WINDOW}), "
        "the sixth is global with wider heads and fewer KV heads",
    )
    p.add_argument("--head-dim-global", type=int, default=0, help="with --gemma4: global layers' head size")
    p.add_argument("--n-head-kv-global", type=int, default=0, help="with --gemma4: global layers' KV heads")
    p.add_argument(
        "--shared-kv-layers",
        type=int,
        default=0,
        help="with --gemma4: the target's last N layers read earlier layers' KV caches and keep none",
    )
    p.add_argument("--mtp", action="store_true", help="with --hybrid: the target carries an MTP block (draft-mtp)")
    p.add_argument(
        "--chat-template",
        metavar="chatml|FILE",
        help="write a chat template into both models: 'chatml', or a jinja file's text",
    )
    return p


def _shape(p: argparse.ArgumentParser, a: argparse.Namespace) -> tuple[ModelShape, int]:
    """The target's shape and the draft's layers the options ask for (the error, through p, when they clash)."""
    moe = {"n_expert": a.n_expert, "n_expert_used": a.n_expert_used, "n_ff_exp": a.n_ff_exp} if a.n_expert else {}
    if a.sliding_window and a.n_expert:
        p.error("--sliding-window writes a dense gemma3; it does not combine with --n-expert")
    if a.hybrid and a.sliding_window:
        p.error("--hybrid writes a qwen35 (qwen35moe with --n-expert); it does not combine with --sliding-window")
    if a.gemma4 and (a.hybrid or a.n_expert):
        p.error("--gemma4 writes a dense gemma4; it does not combine with --hybrid or --n-expert")
    if (a.shared_kv_layers or a.head_dim_global or a.n_head_kv_global) and not a.gemma4:
        p.error("--shared-kv-layers, --head-dim-global and --n-head-kv-global need --gemma4")
    n_layer, draft_layers = HYBRID_LAYERS if a.hybrid else (ModelShape.n_layer, PairSpec.draft_layers)
    if a.gemma4:
        n_layer, draft_layers = GEMMA4_LAYERS
    n_layer = a.n_layer or n_layer
    draft_layers = a.draft_layers or draft_layers
    gemma4 = {
        "gemma4": True,
        "head_dim_global": a.head_dim_global,
        "n_head_kv_global": a.n_head_kv_global,
        "shared_kv_layers": a.shared_kv_layers,
    }
    window = a.sliding_window or (GEMMA4_WINDOW if a.gemma4 else 0)
    shape = ModelShape(
        a.n_embd,
        n_layer,
        a.n_head,
        a.n_head_kv,
        a.n_ff,
        **moe,
        sliding_window=window,
        hybrid=a.hybrid,
        **(gemma4 if a.gemma4 else {}),
    )
    return shape, draft_layers


def _chat_template(p: argparse.ArgumentParser, a: argparse.Namespace) -> str | None:
    """--chat-template's jinja text: ChatML's, or a file's (the error, through p, when it cannot be read)."""
    template = None
    if a.chat_template == "chatml":
        template = CHATML_TEMPLATE
    elif a.chat_template:
        try:
            template = Path(a.chat_template).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            p.error(f"--chat-template: cannot read {a.chat_template}: {exc}")
    return template


if __name__ == "__main__":
    raise SystemExit(main())
