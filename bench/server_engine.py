"""SpecTune's two engines side by side: libspecrt (native) and llama-server behind the same worker protocol
(engine.measure.server_engine), on one pair, one setting, the same prompts.

    .venv/bin/python bench/server_engine.py [--pair real|demo] [--rounds 6] [--tokens 128] [--save]

Both engines are started and loaded once, then take turns prompt by prompt, in order A B in even rounds and
B A in odd ones, each arm a fresh generation of the same prompt at temperature 0. Reported per setting:
whether every generation drafted and accepted the same tokens in both (the counts, step by step, and the
text), and the median of the paired tok/s ratios, llama-server engine over native, with its interval
(engine.core.paired.median_interval). Goals: identical counts always; the ratio's interval reaching 0.97
(measured through llama-server, tokens/s is llama-server's own clock; what streaming each token costs shows
here). The exit status is 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.paired import append_result  # noqa: E402
from engine.core.paired import abba, median_interval  # noqa: E402
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings, to_dict  # noqa: E402
from engine.runtime.client import EngineClient  # noqa: E402

RATIO_GOAL = 0.97
PROMPTS = (
    "Write a Python function that returns the n-th Fibonacci number, with a docstring and tests.",
    'def parse_config(path):\n    """Read a TOML file and return its settings as a dict."""\n',
    "Explain what a hash map is and when a sorted array beats it, with a short example in Python.",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
)
SETTINGS = (
    SpecSettings("draft-simple", draft_n_max=4),
    SpecSettings("ngram-simple", ngram_size_n=3, ngram_size_m=8),
)
ARMS = ("native", "llama-server")


def _pair(which: str) -> tuple[Path, Path, str]:
    if which == "demo":
        from engine.models.demo_models import demo_pair

        target, draft = demo_pair()
        return target, draft, "demo pair (5M-parameter F16 models)"
    from testmodels.real import REAL_PAIR, cached_model

    target, draft = (cached_model(k) for k in REAL_PAIR)
    return target, draft, "Qwen2.5-Coder 1.5B + 0.5B Instruct Q4_K_M"


def _steps(events: list[dict]) -> list[tuple[int, int]]:
    return [(e["drafted"], e["accepted"]) for e in events if e["event"] == "cycle" and not e["prompt"]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", choices=("real", "demo"), default="real")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0, help="llama.cpp threads in both engines (0: its default)")
    ap.add_argument("--save", action="store_true", help="append the report to bench/results/server_engine.txt")
    a = ap.parse_args()
    target, draft, name = _pair(a.pair)
    load = LoadSettings(target, draft, ctx=2048, threads=a.threads, lock_in_ram=True)
    sampling = to_dict(SamplingSettings(temp=0.0))
    lines = [
        f"# {time.strftime('%Y-%m-%d %H:%M')} {platform.machine()} {platform.processor() or ''}: {name}, "
        f"{a.rounds} rounds x {len(PROMPTS)} prompts x {a.tokens} tokens, threads {a.threads or 'default'}"
    ]
    print(lines[0], flush=True)
    missed = False
    clients = {arm: EngineClient(engine=arm) for arm in ARMS}
    try:
        for client in clients.values():
            client.start()
            client.load(load)
        for spec in SETTINGS:
            ratios, same, total, tps = [], 0, 0, {arm: [] for arm in ARMS}
            for r in range(a.rounds):
                for i, prompt in enumerate(PROMPTS):
                    got = {}
                    for arm in abba(ARMS, r * len(PROMPTS) + i):
                        events = list(clients[arm].generate(prompt, a.tokens, spec=to_dict(spec), sampling=sampling))
                        summary = events[-1]["summary"]
                        got[arm] = (summary["tokens_per_s"], _steps(events), summary["text"])
                        tps[arm].append(summary["tokens_per_s"])
                    total += 1
                    same += got["native"][1:] == got["llama-server"][1:]
                    ratios.append(got["llama-server"][0] / got["native"][0])
            ratio = median_interval(ratios)
            identical = same == total
            missed |= not identical or ratio.high < RATIO_GOAL
            line = (
                f"{spec.label(sizes=True):<28} identical steps and text {same}/{total}  "
                f"llama-server engine / native tok/s {ratio.describe()}  "
                f"(median tok/s native {sorted(tps['native'])[len(tps['native']) // 2]:.1f}, "
                f"llama-server {sorted(tps['llama-server'])[len(tps['llama-server']) // 2]:.1f})"
            )
            print(line, flush=True)
            lines.append(line)
    finally:
        for client in clients.values():
            client.close()
    verdict = f"goals (identical counts, ratio interval reaching {RATIO_GOAL}): {'MISSED' if missed else 'met'}"
    print(verdict)
    lines.append(verdict)
    if a.save:
        append_result("server_engine.txt", lines)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
