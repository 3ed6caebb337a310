"""The pictures in docs/: every page of the app, light and dark, with a library that shows what it can hold.

    DISPLAY=:99 .venv/bin/python scripts/docs_screenshots.py [OUT_DIR]   (default: docs)

A new user's library holds only the bundled demo pair, which leaves most of the Models page empty in a
picture. This writes small generated models into a temporary Hugging Face cache, laid out as the hub
client lays them out, so the library lists a chat-template (instruct) pair, a mixture-of-experts pair, a
hybrid (Qwen3.5-style) pair whose target has an MTP head, a model with an MTP head and an EAGLE-3 draft
beside the bundled files; then it runs the app's own scripted session (`python -m app --screenshot`) once
per colour scheme, each in a fresh config folder, writing light pictures to OUT_DIR and dark ones to
OUT_DIR/dark. Nothing is downloaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.page_list import PAGE_NAMES  # noqa: E402
from engine.models.synthetic import CHATML_TEMPLATE, ModelShape, PairSpec, write_pair  # noqa: E402
from testmodels.heads import write_eagle3_draft, write_mtp_model  # noqa: E402

# The pictures written into each folder: the app's scripted session (app/scripted.py) names one per page,
# numbered in the page list's order. The docs link these names; tests/test_docs_links.py holds the two together.
PICTURES = tuple(f"{i}-{name.lower()}.png" for i, name in enumerate(PAGE_NAMES))


def hub_snapshot(cache: Path, repo: str) -> Path:
    """models--ORG--NAME/snapshots/COMMIT/, as huggingface_hub lays a download out."""
    org, name = repo.split("/")
    snap = cache / f"models--{org}--{name}" / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    snap.mkdir(parents=True, exist_ok=True)
    return snap


def populate(cache: Path) -> None:
    chat = write_pair(tempfile.mkdtemp(), PairSpec(chat_template=CHATML_TEMPLATE, dtype="f16", name="tiny-instruct"))
    moe_shape = ModelShape(n_embd=256, n_layer=4, n_head=4, n_head_kv=2, n_ff=512, n_expert=8, n_expert_used=2)
    moe = write_pair(tempfile.mkdtemp(), PairSpec(shape=moe_shape, dtype="q8_0", name="tiny-moe"))
    # Qwen3.5's layout: gated delta-net layers beside full attention, an MTP block on the target
    hybrid_shape = ModelShape(n_layer=8, hybrid=True)
    hybrid = write_pair(
        tempfile.mkdtemp(), PairSpec(shape=hybrid_shape, draft_layers=4, dtype="f16", name="tiny-hybrid", mtp=True)
    )
    files = {
        "example/Tiny-Instruct-GGUF": {"tiny-instruct-f16.gguf": chat[0], "tiny-instruct-draft-f16.gguf": chat[1]},
        "example/Tiny-MoE-8x-GGUF": {"tiny-moe-8x-q8_0.gguf": moe[0], "tiny-moe-draft-q8_0.gguf": moe[1]},
        "example/Tiny-Hybrid-GGUF": {"tiny-hybrid-f16.gguf": hybrid[0], "tiny-hybrid-draft-f16.gguf": hybrid[1]},
    }
    for repo, named in files.items():
        snap = hub_snapshot(cache, repo)
        for name, src in named.items():
            os.replace(src, snap / name)
    write_mtp_model(hub_snapshot(cache, "example/Tiny-MTP-GGUF") / "tiny-mtp-f16.gguf")
    write_eagle3_draft(hub_snapshot(cache, "example/Tiny-EAGLE3-GGUF") / "tiny-eagle3-draft.gguf")


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "docs").resolve()
    cache = Path(tempfile.mkdtemp(prefix="spectune-docs-hub-"))
    populate(cache)
    for scheme, folder in (("light", out), ("dark", out / "dark")):
        folder.mkdir(parents=True, exist_ok=True)
        env = dict(
            os.environ,
            HF_HUB_CACHE=str(cache),
            SPECTUNE_COLOR_SCHEME=scheme,
            SPECTUNE_CONFIG_DIR=tempfile.mkdtemp(prefix="spectune-docs-config-"),
            SPECTUNE_DATA_DIR=tempfile.mkdtemp(prefix="spectune-docs-data-"),
        )
        print(f"[docs] {scheme} pictures into {folder}: {', '.join(PICTURES)}", flush=True)
        done = subprocess.run([sys.executable, "-m", "app", "--screenshot", str(folder)], cwd=ROOT, env=env)
        if done.returncode != 0:
            return done.returncode
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
