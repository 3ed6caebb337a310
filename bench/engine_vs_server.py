"""specrt against the bundled llama-server on the same models and settings.

    .venv/bin/python bench/engine_vs_server.py [--rounds 5] [--tokens 128] [--save]

One invocation writes a synthetic pair with real-looking proportions, starts
llama-server once per setting (127.0.0.1, random port and key), loads specrt
in this process and behind the engine worker, and then alternates: server,
server streamed (as `spectune validate` asks it: "timings_per_token"),
specrt in process, specrt through the worker, for every round and prompt, so
drift of the machine hits all alike. It prints, per setting, the median
tokens/s of each, the ratios to the server, whether the draft/accept counts
agree, and the share of specrt's cycle time spent outside drafting and
verifying (its own overhead). Goal: ratio >= 0.97, outside share <= 3%. The
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
        f"# {a.rounds} rounds x {len(PROMPTS)} prompts x {a.tokens} tokens, temperature 0, alternating runs, "
        f"threads {a.threads or 'default'}"
    )
    out()
    header = (
        f"{'setting':<26} {'server tok/s':>12} {'streamed':>9} {'ratio':>6} {'specrt tok/s':>12} {'ratio':>6} "
        f"{'worker tok/s':>12} {'ratio':>6} {'counts':>7} {'outside':>8} {'loop ovh':>8}"
    )
    out(header)
    engine = Engine(load)
    worst_ratio, worst_outside = 1e9, 0.0
    with EngineClient() as client:
        client.start()
        client.load(load)
        for spec in SETTINGS:
            argv = llama_server_argv(load, spec, sampling, server, extra=["--fit", "off"])
            srv_tps, str_tps, lab_tps, wrk_tps = [], [], [], []
            counts_ok = True
            other = cycle = wall = 0.0
            with LlamaServer(argv) as srv:
                for prompt in PROMPTS:  # warm-up: first touches of weights and caches
                    srv.complete(prompt, 16)
                    run_in_process(engine, spec, sampling, prompt, 16)
                for _ in range(a.rounds):
                    for prompt in PROMPTS:
                        s = server_summary(srv.complete(prompt, a.tokens))
                        streamed = server_completion(srv, prompt, a.tokens)
                        lab = run_in_process(engine, spec, sampling, prompt, a.tokens)
                        wrk = generate(client, prompt, a.tokens, spec, sampling, baseline=not spec.types)
                        srv_tps.append(s["tokens_per_s"])
                        str_tps.append(streamed["tokens_per_s"])
                        lab_tps.append(lab["tokens_per_s"])
                        wrk_tps.append(wrk["tokens_per_s"])
                        counts_ok &= (lab["drafted"], lab["accepted"]) == (s["drafted"], s["accepted"])
                        other += lab["other_ms"]
                        cycle += lab["cycle_ms"]
                        wall += lab["wall_ms"]
            ms, mst, ml, mw = (statistics.median(x) for x in (srv_tps, str_tps, lab_tps, wrk_tps))
            outside = other / cycle if cycle else 0.0
            loop_overhead = (wall - cycle) / wall if wall else 0.0
            worst_ratio = min(worst_ratio, ml / ms)
            worst_outside = max(worst_outside, outside)
            label = spec.spec_type + (f" K={spec.draft_n_max}" if "draft-simple" in spec.types else "")
            out(
                f"{label:<26} {ms:12.1f} {mst:9.1f} {mst / ms:6.3f} {ml:12.1f} {ml / ms:6.3f} "
                f"{mw:12.1f} {mw / ms:6.3f} "
                f"{'same' if counts_ok else 'DIFFER':>7} {100 * outside:7.2f}% {100 * loop_overhead:7.2f}%"
            )
    engine.close()
    out()
    out(
        "ratio = specrt tok/s / llama-server tok/s (medians; both count tokens after the first over the time after "
        "the prompt)"
    )
    out(
        "streamed = llama-server's own tok/s when the same request is streamed with timings_per_token; the ratio "
        "beside it is streamed / not streamed"
    )
    out("outside = specrt cycle time outside drafting and verifying; loop ovh = Python step-loop time outside specrt")
    out(f"worst ratio {worst_ratio:.3f} (goal >= 0.97), worst outside share {100 * worst_outside:.2f}% (goal <= 3%)")
    if a.save:
        backend = "cuda" if "CUDA" in build_info() else "cpu"
        dest = Path(__file__).resolve().parent / "results" / f"engine_vs_server-{backend}.txt"
        dest.parent.mkdir(exist_ok=True)
        dest.write_text("\n".join(lines) + "\n")
        print(f"saved {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
