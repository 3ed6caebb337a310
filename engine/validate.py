"""Validation: run the exported llama-server command for real and hold it against the lab.

The bundled llama-server is started from the exported argv (plus --metrics), as
an argv list, on 127.0.0.1, a free port and a random API key
(engine.server_runner.LlamaServer). Each prompt goes through POST /completion,
streamed with "timings_per_token", and the last chunk's timings give
draft_n / draft_n_accepted and the speed; /props gives the build and /metrics the
spec-decode counters. Then the server stops and the lab (the engine worker)
runs the same prompts on the same models and settings.

At temperature 0 both sample greedily with llama.cpp's own code, so the drafted
and accepted counts must be identical prompt by prompt: ``agree``. Speeds are
each engine's own measure (the lab: tokens after the first over the cycles'
wall time; llama-server: predicted_n over predicted_ms), and ``ratio`` is
server / lab.
"""

from __future__ import annotations

import json
import re
import statistics
import time
import urllib.error
import urllib.request
from pathlib import Path

from engine.client import EngineClient
from engine.export import export_llama_server
from engine.llama_install import server_path
from engine.server_runner import LlamaServer, ServerError, server_summary
from engine.settings import LoadSettings, SamplingSettings, SpecSettings

REQUEST_TIMEOUT_S = 600.0
_METRIC_LINE = re.compile(r'^llamacpp:(\w+)(?:\{position="(\d+)"\})?\s+(\S+)$')


class ValidateError(RuntimeError):
    """Validation could not run; the message says why."""


def load_prompts(workload: str | Path | None = None, prompts: list[str] | None = None) -> list[str]:
    """Prompts from --prompt (repeatable) and/or a workload file (or shipped set name)."""
    texts = list(prompts or [])
    if workload is not None:
        try:
            from engine.workloads import load_workload
        except ImportError:
            load_workload = None
        if load_workload is not None:
            texts += load_workload(workload).texts()
        else:
            data = json.loads(Path(workload).read_text(encoding="utf-8"))
            texts += [p["text"] if isinstance(p, dict) else str(p) for p in data["prompts"]]
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise ValidateError("no prompts to validate with: give --prompt TEXT or --workload-prompts FILE")
    return texts


def _post_stream(srv: LlamaServer, body: dict) -> list[dict]:
    req = urllib.request.Request(srv.base_url + "/completion", data=json.dumps(body).encode(), method="POST")
    req.add_header("Authorization", f"Bearer {srv.api_key}")
    req.add_header("Content-Type", "application/json")
    chunks = []
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
            for raw in resp:
                line = raw.decode("utf-8", errors="replace").strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunks.append(json.loads(line[len("data: "):]))
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:500]
        raise ServerError(f"llama-server answered {exc.code} to POST /completion: {detail}") from exc
    return chunks


def server_completion(srv: LlamaServer, prompt: str, n_predict: int) -> dict:
    """One streamed completion in the lab's terms; sampling comes from the server's own flags."""
    started = time.perf_counter()
    chunks = _post_stream(srv, {"prompt": prompt, "n_predict": n_predict, "stream": True,
                                "timings_per_token": True, "cache_prompt": False})
    if not chunks or not chunks[-1].get("stop"):
        raise ServerError("llama-server's stream ended without a final chunk")
    timed = [c for c in chunks if "timings" in c]
    if not timed:
        raise ServerError("llama-server sent no timings")
    timings = timed[-1]["timings"]
    summary = server_summary({"timings": timings, "content": "".join(c.get("content", "") for c in chunks)})
    summary["predicted_ms"] = float(timings.get("predicted_ms", 0.0))
    summary["wall_ms"] = round((time.perf_counter() - started) * 1000.0, 3)
    return summary


def parse_metrics(text: str) -> dict:
    """The spec-decode counters of llama-server's Prometheus text."""
    found: dict = {}
    by_position: dict[int, int] = {}
    for line in text.splitlines():
        m = _METRIC_LINE.match(line.strip())
        if not m or not m.group(1).startswith("spec_decode_"):
            continue
        name, position, value = m.group(1), m.group(2), float(m.group(3))
        if position is not None:
            by_position[int(position)] = int(value)
        else:
            found[name] = int(value)
    if by_position:
        found["accepted_by_position"] = [by_position.get(i, 0) for i in range(max(by_position) + 1)]
    return found


def read_metrics(srv: LlamaServer) -> dict | None:
    req = urllib.request.Request(srv.base_url + "/metrics")
    req.add_header("Authorization", f"Bearer {srv.api_key}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return parse_metrics(resp.read().decode("utf-8", errors="replace"))
    except urllib.error.HTTPError:
        return None   # a server without --metrics answers 501


def _lab_totals(runs: list[dict]) -> dict:
    tokens = sum(r["tokens_generated"] for r in runs)
    drafted = sum(r["drafted"] for r in runs)
    accepted = sum(r["accepted"] for r in runs)
    steps = sum(r["steps"] for r in runs)
    timed_tokens = sum(max(r["tokens_generated"] - 1, 0) for r in runs)
    wall_ms = sum(r["wall_ms"] for r in runs)
    by_position: list[int] = []
    for r in runs:
        for i, n in enumerate(r["accepted_by_position"]):
            by_position += [0] * (i + 1 - len(by_position))
            by_position[i] += n
    return {"tokens_generated": tokens, "tokens_per_s": round(timed_tokens * 1000.0 / wall_ms, 3) if wall_ms else 0.0,
            "drafted": drafted, "accepted": accepted,
            "acceptance_rate": round(accepted / drafted, 6) if drafted else 0.0, "steps": steps,
            "mean_accepted_length": round(1 + accepted / steps, 6) if steps else 1.0,
            "accepted_by_position": by_position}


def _server_totals(runs: list[dict]) -> dict:
    tokens = sum(r["tokens_generated"] for r in runs)
    drafted = sum(r["drafted"] for r in runs)
    accepted = sum(r["accepted"] for r in runs)
    total_ms = sum(r["predicted_ms"] for r in runs)
    return {"tokens_generated": tokens, "tokens_per_s": round(tokens * 1000.0 / total_ms, 3) if total_ms else 0.0,
            "drafted": drafted, "accepted": accepted,
            "acceptance_rate": round(accepted / drafted, 6) if drafted else 0.0}


def _counts(run: dict) -> tuple[int, int]:
    return run["drafted"], run["accepted"]


def _serve_then_lab(argv: list[str], load: LoadSettings, spec: SpecSettings, sampling: SamplingSettings,
                    prompts: list[str], max_tokens: int, startup_timeout: float) -> dict:
    """One pass: llama-server on every prompt, stopped, then the lab on the same prompts.

    One after the other, never both at once: a pair that fits once on the GPU
    need not fit twice."""
    with LlamaServer(argv, startup_timeout=startup_timeout) as srv:
        build_info = (srv.props() or {}).get("build_info")
        server_runs = [server_completion(srv, prompt, max_tokens) for prompt in prompts]
        metrics = read_metrics(srv)

    from engine.cli import generate   # the run command's own generation loop

    with EngineClient() as client:
        client.start()
        client.load(load)
        lab_runs = [generate(client, prompt, max_tokens, spec, sampling) for prompt in prompts]
    return {"server_runs": server_runs, "lab_runs": lab_runs, "build_info": build_info, "metrics": metrics}


def validate(load: LoadSettings, spec: SpecSettings, sampling: SamplingSettings, prompts: list[str],
             max_tokens: int, *, passes: int = 1, startup_timeout: float = 180.0) -> dict:
    """Serve the exported command, then the lab, on the same prompts; both summaries side by side.

    With ``passes`` > 1 the pair of runs is repeated (server, lab, server, lab, ...)
    and each side's speed is the median over the passes (for two, their mean): a machine whose speed drifts between
    runs (a busy or throttling one) then weighs on both sides alike. Counts and
    texts come from the first pass; at temperature 0 every pass must agree."""
    if max_tokens < 1:
        raise ValidateError(f"--max-tokens must be 1 or more, got {max_tokens}")
    if passes < 1:
        raise ValidateError(f"--passes must be 1 or more, got {passes}")
    exported = export_llama_server(load, spec, sampling, server_path())
    argv = exported.argv + ([] if "--metrics" in exported.argv else ["--metrics"])
    done = [_serve_then_lab(argv, load, spec, sampling, prompts, max_tokens, startup_timeout) for _ in range(passes)]
    lab_runs, server_runs = done[0]["lab_runs"], done[0]["server_runs"]
    metrics = done[0]["metrics"]

    lab = _lab_totals(lab_runs)
    server = _server_totals(server_runs)
    by_pass = [{"lab_tps": _lab_totals(d["lab_runs"])["tokens_per_s"],
                "server_tps": _server_totals(d["server_runs"])["tokens_per_s"]} for d in done]
    if passes > 1:
        lab["tokens_per_s"] = statistics.median(p["lab_tps"] for p in by_pass)
        server["tokens_per_s"] = statistics.median(p["server_tps"] for p in by_pass)
    server["build_info"] = done[0]["build_info"]
    server["metrics"] = metrics
    per_prompt = [{"prompt": prompt,
                   "lab": {k: r[k] for k in ("tokens_generated", "tokens_per_s", "drafted", "accepted")},
                   "server": {k: s[k] for k in ("tokens_generated", "tokens_per_s", "drafted", "accepted")},
                   "same_text": r["text"] == s["text"]}
                  for prompt, r, s in zip(prompts, lab_runs, server_runs)]
    # only greedy sampling makes the two runs the same computation, in every pass
    agree = (all(_counts(lr) == _counts(first) and _counts(sr) == _counts(first)
                 for d in done for lr, sr, first in zip(d["lab_runs"], d["server_runs"], lab_runs))
             if sampling.temp == 0 else None)
    metrics_agree = None
    if metrics and "spec_decode_num_draft_tokens_total" in metrics:
        metrics_agree = (metrics["spec_decode_num_draft_tokens_total"] == server["drafted"]
                         and metrics.get("spec_decode_num_accepted_tokens_total") == server["accepted"])
    return {"lab": lab, "server": server, "agree": agree,
            "ratio": round(server["tokens_per_s"] / lab["tokens_per_s"], 4) if lab["tokens_per_s"] else None,
            "metrics_agree": metrics_agree, "per_prompt": per_prompt, "argv": exported.argv,
            "dialect": exported.dialect, "warnings": exported.warnings, "temperature": sampling.temp,
            "max_tokens": max_tokens, "passes": by_pass}


def format_report(report: dict) -> str:
    lab, server = report["lab"], report["server"]
    rows = [("tokens", lab["tokens_generated"], server["tokens_generated"]),
            ("tokens/s", f"{lab['tokens_per_s']:.1f}", f"{server['tokens_per_s']:.1f}"),
            ("drafted", lab["drafted"], server["drafted"]),
            ("accepted", lab["accepted"], server["accepted"]),
            ("acceptance", f"{lab['acceptance_rate']:.3f}", f"{server['acceptance_rate']:.3f}")]
    lines = [f"{'':<12}{'lab':>12}{'llama-server':>14}"]
    lines += [f"{name:<12}{a!s:>12}{b!s:>14}" for name, a, b in rows]
    agree = report["agree"]
    if agree is None:
        lines.append(f"agree: not compared (temperature {report['temperature']:g}: sampling differs run to run)")
    else:
        lines.append("agree: " + ("yes, the same drafted and accepted counts on every prompt" if agree
                                  else "NO, the drafted/accepted counts differ (see --json per_prompt)"))
    if report["ratio"] is not None:
        passes = report.get("passes") or []
        each = (f" (median of {len(passes)} alternating passes: "
                + ", ".join(f"{p['server_tps'] / p['lab_tps']:.3f}" for p in passes if p["lab_tps"]) + ")"
                if len(passes) > 1 else "")
        lines.append(f"llama-server / lab speed: {report['ratio']:.3f}{each}")
    if server.get("build_info"):
        lines.append(f"llama-server build: {server['build_info']}")
    if report.get("metrics_agree") is not None:
        lines.append("/metrics spec-decode counters " + ("match" if report["metrics_agree"] else "DIFFER from")
                     + " the per-request timings")
    return "\n".join(lines)
