"""Does the tune at N clients hold when its command is run on its own? (issue 31)

    .venv/bin/python bench/concurrency_check.py [--real] [--clients 2] [--rounds 2] [--repeats 3] [--save]

First `tune_concurrent` (engine.measure.concurrent_tune) tunes the pair at --clients N, as
`spectune tune --clients N` does: its candidates beside no speculation, two servers side by side.
Then, independently, the best candidate's exported command and the command without speculation
are run alone, one server at a time, each started afresh: --repeats times, in alternating order
(A B, B A, ...), every start sending the same batches of N requests at once. Each repeat's ratio of
aggregate tokens/s gives a median and its interval (engine.core.paired).

The check passes when the independent median lies inside the tune's interval for that candidate,
and the independent interval does not contradict the tune's verdict (a verdict "beats no
speculation" needs an independent median above 1; "slower" one below 1). Exit status 1 otherwise.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.paired import abba, append_result  # noqa: E402
from bench.serve_overhead import bench_pair  # noqa: E402
from engine.core.chat import Conversation  # noqa: E402
from engine.core.paired import median_interval  # noqa: E402
from engine.core.settings import LoadSettings, SamplingSettings  # noqa: E402
from engine.core.workloads import load_workload  # noqa: E402
from engine.deploy.export import llama_server_argv  # noqa: E402
from engine.llama.install import server_path  # noqa: E402
from engine.llama.server import LlamaServer  # noqa: E402
from engine.measure.concurrent_tune import NONE, _batches, run_batch, tune_concurrent  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", action="store_true", help="the real Qwen2.5-Coder pair instead of the demo pair")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--save", action="store_true", help="also append to bench/results/concurrency_check.txt")
    a = ap.parse_args()
    lines: list[str] = []

    def out(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    target, draft, name = bench_pair(a.real)
    load = LoadSettings(target, draft, ctx=1024)
    sampling = SamplingSettings(temp=0.0)
    prompts = [p.conversation or Conversation.user(p.text) for p in load_workload("code-editing").prompts][:8]
    out(f"# concurrency_check  {time.strftime('%Y-%m-%d %H:%M')}  {platform.machine()}  {platform.processor()}")
    out(f"# {name}; {a.clients} clients; {len(prompts)} code-editing conversations x {a.tokens} tokens")
    result = tune_concurrent(
        load, prompts, a.clients, sampling=sampling, max_tokens=a.tokens, rounds=a.rounds, progress=lambda m: None
    )
    for c in result.candidates:
        out(f"tune: {c.label:<20} {c.ratio.describe() if c.ratio else '-'}")
    out(f"tune verdict: {result.verdict_text()}")
    best = result.best
    batches = _batches(prompts, a.clients, a.rounds)
    argvs = {
        arm: llama_server_argv(load, spec, sampling, server_path(), parallel=a.clients)
        for arm, spec in (("none", NONE), ("best", best.spec))
    }
    ratios = []
    for r in range(a.repeats):
        tps = {}
        for arm in abba(["none", "best"], r):
            with LlamaServer(argvs[arm]) as srv:  # alone, started afresh
                run_batch(srv, batches[0][:1], 8, sampling)  # warm-up
                got = [run_batch(srv, b, a.tokens, sampling) for b in batches]
            tps[arm] = sum(b.generated for b in got) / sum(b.seconds for b in got)
        ratios.append(tps["best"] / tps["none"])
        out(f"alone, repeat {r + 1}: none {tps['none']:.1f} tok/s, {best.label} {tps['best']:.1f} tok/s")
    alone = median_interval(ratios)
    tuned = best.ratio
    assert tuned is not None
    inside = tuned.low <= alone.median <= tuned.high
    agrees = (not tuned.above_one or alone.median > 1.0) and (not tuned.below_one or alone.median < 1.0)
    out(f"alone: {best.label} against none {alone.describe()}")
    out(f"the independent median inside the tune's interval: {inside}; verdicts agree: {agrees}")
    out("ok" if inside and agrees else "MISSED")
    if a.save:
        append_result("concurrency_check.txt", lines)
    return 0 if inside and agrees else 1


if __name__ == "__main__":
    sys.exit(main())
