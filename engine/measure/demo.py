"""``spectune demo``: the app's demo, headless, on the bundled demo pair.

Loads the pair once and runs the quick check the app's demo runs (engine.measure.quick_check): the same
prompts (the code-completion set's, one a round), the same length, the same settings
(engine.measure.candidates.QUICK) and rounds of no speculation and every setting in alternating order, so that
both give the same answer; prints each setting's median ratio to no speculation with its interval, and ends
with the llama-server command that reproduces the best.
The pair is the trained demo family in resources/models (engine.models.demo_models);
a checkout without those files falls back to a synthetic pair from
engine.models.synthetic, written once into the user cache.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from engine.core.paths import cache_dir
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings, to_dict
from engine.deploy.export import ServerExport, llama_server_argv
from engine.llama.install import server_path
from engine.measure.candidates import QUICK
from engine.measure.generate import generate
from engine.measure.quick_check import (
    BASELINE,
    MAX_TOKENS,
    ROUNDS,
    Outcome,
    round_prompt,
    schedule,
    summary,
    verdict,
)
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


def demo_prompts(rounds: int) -> list[str]:
    """The prompts the app's demo checks on, one a round: the code-completion set's first ones (the set the
    demo's live run goes through, app.demo_run.set_demo_knobs), or DEMO_PROMPTS where it cannot be read."""
    from engine.core.workloads import WorkloadError, load_workload

    try:
        prompts = [p.text for p in load_workload("code-completion").prompts[:rounds]]
    except (WorkloadError, OSError):
        prompts = []
    return prompts or list(DEMO_PROMPTS[:rounds])


def run_demo(
    json_output: bool = False, max_tokens: int = MAX_TOKENS, quick: bool = False, engine: str = "auto", server=None
) -> int:
    """The app's demo without a window: the quick check (engine.measure.quick_check) on the same prompt, settings
    and rounds, each round running no speculation and every setting in alternating order; the best by its
    median ratio to no speculation, with its interval, and its llama-server command. quick: two rounds."""
    log = sys.stderr if json_output else sys.stdout
    target, draft = demo_pair()
    load = LoadSettings(target=target, draft=draft, ctx=2048)
    sampling = SamplingSettings(temp=0.0)
    rounds = 2 if quick else ROUNDS
    prompts = demo_prompts(rounds)
    plan = schedule(QUICK, rounds=rounds)
    print(f"demo pair: {target.name} + {draft.name} in {target.parent}", file=log)
    with EngineClient(engine=engine, server=server) as client:
        hello = client.start()
        if client.native_failure:
            print(f"note: {client.native_failure} Measuring through llama-server.", file=sys.stderr)
        print(f"engine: {client.engine_kind}, {hello['llama'][:60]}...", file=log)
        loaded = client.load(load)
        print(f"loaded in {loaded['load_s']:.2f} s", file=log)
        done: list[tuple[int, SpecSettings, float]] = []
        for i, (round_, spec) in enumerate(plan, 1):
            prompt = round_prompt(prompts, round_)
            summary_ = generate(client, prompt, max_tokens, spec, sampling, baseline=spec == BASELINE)
            done.append((round_, spec, float(summary_.get("tokens_per_s") or 0.0)))
            name = "no speculation" if spec == BASELINE else spec.label(sizes=True)
            print(f"run {i:2d} of {len(plan)}, round {round_ + 1}: {name:<50} {done[-1][2]:9.1f} tok/s", file=log)
        engine_kind, native_failure = client.engine_kind, client.native_failure
    outcomes = verdict(done)
    if not outcomes:
        print("error: no round of the check was complete", file=sys.stderr)
        return 1
    results = [_result(o, done) for o in outcomes]
    best = results[0]
    try:
        server = str(server_path())
    except RuntimeError:
        server = "llama-server"
    command = ServerExport(llama_server_argv(load, outcomes[0].spec, sampling, server), "current").line("bash")
    baseline_tps = statistics.median(tps for _, spec, tps in done if spec == BASELINE)
    if json_output:
        print(
            json.dumps(
                {
                    "target": str(target),
                    "draft": str(draft),
                    "prompts": len({round_prompt(prompts, r) for r, _ in plan}),
                    "rounds": len({r for r, _ in plan}),
                    "max_tokens": max_tokens,
                    "baseline_tokens_per_s": round(baseline_tps, 3),
                    "results": results,
                    "best": best,
                    "verdict": summary(outcomes),
                    "command": command,
                    "engine": engine_kind,
                    **({"native_failure": native_failure} if native_failure else {}),
                }
            )
        )
    else:
        print(f"{'setting':<50} {'tok/s':>9} {'speedup':>8}  interval")
        for r in results:
            print(
                f"{r['setting']:<50} {r['tokens_per_s']:9.1f} {r['speedup']:8.3f}  x{r['low']:.2f} to x{r['high']:.2f}"
            )
        print(summary(outcomes))
        print("llama-server command for the best:")
        print(command)
    return 0


def _result(outcome: Outcome, done: list[tuple[int, SpecSettings, float]]) -> dict:
    """One setting's line of the demo's JSON: its median tokens/s and its ratio to no speculation."""
    ratio = outcome.ratio
    return {
        "setting": outcome.spec.label(sizes=True),
        "spec": to_dict(outcome.spec),
        "tokens_per_s": statistics.median(tps for _, spec, tps in done if spec == outcome.spec),
        "speedup": outcome.speedup,
        "low": ratio.low,
        "high": ratio.high,
        "pays": outcome.pays,
    }
