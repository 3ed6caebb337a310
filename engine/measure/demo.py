"""``spectune demo``: the app's main job, headless, on the bundled demo pair.

Loads the pair once, measures the no-speculation baseline on a few prompts,
tries a small set of methods and draft lengths on the same prompts, prints a
table, and ends with the llama-server command that reproduces the best setting.
The pair is the trained demo family in resources/models (engine.models.demo_models);
a checkout without those files falls back to a synthetic pair from
engine.models.synthetic, written once into the user cache.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.core.paths import cache_dir
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.core.stats import RunStats
from engine.deploy.export import ServerExport, llama_server_argv
from engine.llama.install import server_path
from engine.measure.candidates import QUICK
from engine.measure.generate import generate
from engine.models.synthetic import ModelShape, PairSpec, write_pair
from engine.runtime.client import EngineClient

DEMO_PAIR = PairSpec(
    shape=ModelShape(n_embd=384, n_layer=6, n_head=6, n_head_kv=2, n_ff=1024),
    draft_layers=1,
    divergence=0.12,
    dtype="f16",
    name="spectune-demo-synthetic",
)

DEMO_PROMPTS = (
    "def the value of the data is",
    "import self return None for value in list",
    "the model and the draft are in the cache of the target",
)


def demo_pair() -> tuple[Path, Path]:
    """The trained demo family shipped in resources/models (engine.models.demo_models), or, in a checkout
    without it, a synthetic pair written once into the user cache."""
    from engine.models.demo_models import DemoModelError
    from engine.models.demo_models import demo_pair as trained_pair

    try:
        return trained_pair()
    except DemoModelError:
        return synthetic_pair()


def synthetic_pair() -> tuple[Path, Path]:
    out = cache_dir() / "demo" / "synthetic-v2"
    target, draft = out / "target.gguf", out / "draft.gguf"
    if not (target.exists() and draft.exists()):
        # big enough that the target's decode, not per-cycle overhead, sets the pace
        write_pair(out, DEMO_PAIR)
    return target, draft


def demo_prompts(quick: bool) -> tuple[str, ...]:
    """One prompt from each shipped workload set (the first set only with quick)."""
    from engine.core.workloads import WorkloadError, load_workload

    names = (
        ("code-completion",)
        if quick
        else ("code-completion", "code-editing", "explanation", "summarization", "creative")
    )
    try:
        return tuple(load_workload(name).prompts[0].text for name in names)
    except (WorkloadError, OSError, IndexError):
        return DEMO_PROMPTS[:1] if quick else DEMO_PROMPTS


def _measure(
    client: EngineClient,
    spec: SpecSettings,
    sampling: SamplingSettings,
    prompts: tuple[str, ...],
    max_tokens: int,
    baseline: bool,
) -> dict:
    total = RunStats.of_summaries(
        [generate(client, prompt, max_tokens, spec, sampling, baseline=baseline) for prompt in prompts]
    )
    return {
        "tokens_per_s": total.tokens_per_s,
        "drafted": total.drafted,
        "accepted": total.accepted,
        "acceptance_rate": total.acceptance_rate,
    }


def run_demo(
    json_output: bool = False, max_tokens: int = 96, quick: bool = False, engine: str = "auto", server=None
) -> int:
    log = sys.stderr if json_output else sys.stdout
    target, draft = demo_pair()
    load = LoadSettings(target=target, draft=draft, ctx=2048)
    sampling = SamplingSettings(temp=0.0)
    prompts = demo_prompts(quick)
    candidates = QUICK[1:3] if quick else QUICK  # the quick check's settings (engine.measure.candidates)
    print(f"demo pair: {target.name} + {draft.name} in {target.parent}", file=log)
    with EngineClient(engine=engine, server=server) as client:
        hello = client.start()
        if client.native_failure:
            print(f"note: {client.native_failure} Measuring through llama-server.", file=sys.stderr)
        print(f"engine: {client.engine_kind}, {hello['llama'][:60]}...", file=log)
        loaded = client.load(load)
        print(f"loaded in {loaded['load_s']:.2f} s", file=log)
        base = _measure(client, SpecSettings("none"), sampling, prompts, max_tokens, baseline=True)
        print(f"{'setting':<44} {'tok/s':>9} {'accept':>7} {'speedup':>8}", file=log)
        print(f"{'baseline (no speculation)':<44} {base['tokens_per_s']:9.1f} {'':>7} {1.0:8.3f}", file=log)
        results = []
        for spec in candidates:
            r = _measure(client, spec, sampling, prompts, max_tokens, baseline=False)
            r["speedup"] = r["tokens_per_s"] / base["tokens_per_s"] if base["tokens_per_s"] else 0.0
            r["setting"] = spec.label(sizes=True)
            r["spec"] = {k: v for k, v in spec.__dict__.items()}
            results.append(r)
            print(
                f"{r['setting']:<44} {r['tokens_per_s']:9.1f} {r['acceptance_rate']:7.3f} {r['speedup']:8.3f}", file=log
            )
    best = max(results, key=lambda r: r["tokens_per_s"])
    best_spec = SpecSettings(**best["spec"])
    try:
        server = str(server_path())
    except RuntimeError:
        server = "llama-server"
    command = ServerExport(llama_server_argv(load, best_spec, sampling, server), "current").line("bash")
    if json_output:
        print(
            json.dumps(
                {
                    "target": str(target),
                    "draft": str(draft),
                    "prompts": len(prompts),
                    "max_tokens": max_tokens,
                    "baseline_tokens_per_s": round(base["tokens_per_s"], 3),
                    "results": results,
                    "best": best,
                    "command": command,
                    "engine": client.engine_kind,
                    **({"native_failure": client.native_failure} if client.native_failure else {}),
                }
            )
        )
    else:
        print(f"best: {best['setting']} at {best['tokens_per_s']:.1f} tok/s, {best['speedup']:.3f}x the baseline")
        print("llama-server command for it:")
        print(command)
    return 0
