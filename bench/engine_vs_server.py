"""specrt against the bundled llama-server on the same models and settings.

    .venv/bin/python bench/engine_vs_server.py [--rounds 5] [--tokens 128] [--save]

One invocation writes a synthetic pair with real-looking proportions, starts
llama-server once per setting (127.0.0.1, random port and key), loads specrt
in this process and behind the engine worker, and then takes turns: server,
server streamed (as `spectune validate` asks it: "timings_per_token"),
specrt in process, specrt through the worker, for every round and prompt, in
that order in even rounds and reversed in odd ones (A B B A), so drift of the
machine hits all alike and no arm is always first. Each arm's tokens/s is
divided by the server's from the same round and prompt; the table shows the
median of those paired ratios with their quartiles, whether the draft/accept
counts agree, and the share of specrt's cycle time spent outside drafting and
verifying (its own overhead). Goal: ratio >= 0.97 (missed when the upper
quartile is below it; the exit status is then 1), outside share <= 3%. The
streamed column says what streaming costs the server itself.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.paired import abba, median_and_quartiles, misses_floor  # noqa: E402
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings  # noqa: E402
from engine.core.stats import RunStats  # noqa: E402
from engine.deploy.export import llama_server_argv  # noqa: E402
from engine.llama.install import server_path  # noqa: E402
from engine.llama.server import LlamaServer, server_summary  # noqa: E402
from engine.measure.generate import generate  # noqa: E402
from engine.measure.validate import server_completion  # noqa: E402
from engine.models.synthetic import ModelShape, PairSpec, write_pair  # noqa: E402
from engine.runtime.binding import Engine, build_info  # noqa: E402
from engine.runtime.client import EngineClient  # noqa: E402

PROMPTS = (
    "def the value of the data is",
    "the model and the draft are in the cache of the target model and the draft",
)
RATIO_GOAL = 0.97  # specrt in process against llama-server
OUTSIDE_GOAL = 0.03  # specrt's cycle time outside drafting and verifying
SETTINGS = (
    SpecSettings("none"),
    SpecSettings("draft-simple", draft_n_max=4),
    SpecSettings("ngram-simple", ngram_size_n=3, ngram_size_m=8),
)


def run_in_process(engine: Engine, spec: SpecSettings, sampling: SamplingSettings, prompt: str, n: int) -> dict:
    engine.set_spec(spec)
    engine.set_sampling(sampling)
    engine.begin(prompt, n, baseline=not spec.types)
    stats = RunStats()
    while True:
        t0 = time.perf_counter()
        c = engine.step()
        wall = (time.perf_counter() - t0) * 1000.0
        if c is None:
            break
        stats.add(
            is_prompt=c.is_prompt,
            n_prompt=c.n_prompt,
            drafted=c.drafted,
            accepted=c.accepted,
            emitted=c.emitted,
            draft_ms=c.draft_ms,
            verify_ms=c.verify_ms,
            decode_ms=c.decode_ms,
            other_ms=c.other_ms,
            cycle_ms=c.cycle_ms,
            wall_ms=wall,
            text=c.text,
        )
    return stats.summary()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--n-embd", type=int, default=512)
    ap.add_argument("--n-layer", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads for both (0: llama.cpp's default)")
    ap.add_argument("--save", action="store_true", help="also write bench/results/engine_vs_server-<backend>.txt")
    a = ap.parse_args()

    lines: list[str] = []

    def out(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    tmp = Path(tempfile.mkdtemp(prefix="spectune-bench-"))
    shape = ModelShape(n_embd=a.n_embd, n_layer=a.n_layer, n_head=8, n_head_kv=4, n_ff=a.n_embd * 3)
    target, draft = write_pair(tmp, PairSpec(shape=shape, draft_layers=1, divergence=0.12, dtype="f16"))
    load = LoadSettings(target, draft, ctx=2048, threads=a.threads, threads_batch=a.threads)
    sampling = SamplingSettings(temp=0.0)
    server = server_path()
    out(
        f"# engine_vs_server  {time.strftime('%Y-%m-%d %H:%M')}  {platform.machine()}  "
        f"{platform.processor() or platform.system()}"
    )
    out(f"# {build_info()[:100]}")
    out(
        f"# pair: n_embd {a.n_embd}, target {a.n_layer} layers, draft 1 layer, f16; "
        f"{target.stat().st_size / 2**20:.1f} + {draft.stat().st_size / 2**20:.1f} MiB"
    )
    out(
        f"# {a.rounds} rounds x {len(PROMPTS)} prompts x {a.tokens} tokens, temperature 0, arms in A B B A order, "
        f"threads {a.threads or 'default'}"
    )
    out()
    header = (
        f"{'setting':<26} {'server tok/s':>12} {'streamed':>17} {'specrt (in process)':>23} "
        f"{'specrt (worker)':>23} {'counts':>7} {'outside':>8} {'loop ovh':>8}"
    )
    out(header)
    engine = Engine(load)
    missed, worst_outside, specrt_ratios = False, 0.0, []
    arms = ("server", "streamed", "specrt", "worker")
    with EngineClient() as client:
        client.start()
        client.load(load)
        for spec in SETTINGS:
            argv = llama_server_argv(load, spec, sampling, server, extra=["--fit", "off"])
            tps: dict[str, list[float]] = {arm: [] for arm in arms}
            counts_ok = True
            other = cycle = wall = 0.0
            with LlamaServer(argv) as srv:
                run = {
                    "server": lambda p, n: server_summary(srv.complete(p, n)),
                    "streamed": lambda p, n: server_completion(srv, p, n),
                    "specrt": lambda p, n, spec=spec: run_in_process(engine, spec, sampling, p, n),
                    "worker": lambda p, n, spec=spec: generate(client, p, n, spec, sampling, baseline=not spec.types),
                }
                for prompt in PROMPTS:  # warm-up: first touches of weights and caches, every arm alike
                    for arm in arms:
                        run[arm](prompt, 16)
                for r in range(a.rounds):
                    for prompt in PROMPTS:
                        got = {arm: run[arm](prompt, a.tokens) for arm in abba(arms, r)}
                        for arm in arms:
                            tps[arm].append(got[arm]["tokens_per_s"])
                        lab, s = got["specrt"], got["server"]
                        counts_ok &= (lab["drafted"], lab["accepted"]) == (s["drafted"], s["accepted"])
                        other += lab["other_ms"]
                        cycle += lab["cycle_ms"]
                        wall += lab["wall_ms"]
            ratios = {arm: [x / y for x, y in zip(tps[arm], tps["server"])] for arm in arms[1:]}
            specrt_ratios += ratios["specrt"]
            missed |= misses_floor(ratios["specrt"], RATIO_GOAL)
            outside = other / cycle if cycle else 0.0
            loop_overhead = (wall - cycle) / wall if wall else 0.0
            worst_outside = max(worst_outside, outside)
            label = spec.spec_type + (f" K={spec.draft_n_max}" if "draft-simple" in spec.types else "")
            cells = []
            for arm in arms[1:]:
                m, q1, q3 = median_and_quartiles(ratios[arm])
                cells.append(f"{statistics.median(tps[arm]):7.1f} {m:5.3f} {q1:5.3f}-{q3:5.3f}")
            out(
                f"{label:<26} {statistics.median(tps['server']):12.1f} {cells[0]:>17} {cells[1]:>23} {cells[2]:>23} "
                f"{'same' if counts_ok else 'DIFFER':>7} {100 * outside:7.2f}% {100 * loop_overhead:7.2f}%"
            )
    engine.close()
    out()
    out(
        "each arm: median tok/s, then the median and quartiles of its ratio to llama-server's tok/s in the same "
        "round and prompt (both count tokens after the first over the time after the prompt)"
    )
    out(
        "streamed = llama-server's own tok/s when the same request is streamed with timings_per_token, so its ratio "
        "says what streaming costs the server"
    )
    out("outside = specrt cycle time outside drafting and verifying; loop ovh = Python step-loop time outside specrt")
    m, q1, q3 = median_and_quartiles(specrt_ratios)
    out(
        f"specrt / server over all settings: {m:.3f} (quartiles {q1:.3f}-{q3:.3f}; goal >= {RATIO_GOAL}, "
        f"{'MISSED' if missed else 'met'} per setting); worst outside share {100 * worst_outside:.2f}% (goal <= 3%)"
    )
    if a.save:
        backend = "cuda" if "CUDA" in build_info() else "cpu"
        dest = Path(__file__).resolve().parent / "results" / f"engine_vs_server-{backend}.txt"
        dest.parent.mkdir(exist_ok=True)
        dest.write_text("\n".join(lines) + "\n")
        print(f"saved {dest}")
    return 1 if missed or worst_outside > OUTSIDE_GOAL else 0


if __name__ == "__main__":
    raise SystemExit(main())
