"""Validation: run the exported llama-server command for real and hold it against the lab.

The bundled llama-server is started from the exported argv (plus --metrics), as
an argv list, on 127.0.0.1, a free port and a random API key
(engine.llama.server.LlamaServer). Each text prompt goes through POST /completion,
and each conversation (chat mode) through POST /v1/chat/completions, both streamed
with "timings_per_token"; the last chunk's timings give draft_n / draft_n_accepted
and the speed. The lab renders a conversation with the same chat code the server
runs (specrt_chat_prompt); /props gives the build and /metrics the
spec-decode counters. The lab (the engine worker) runs the same prompts on the
same models and settings.

How the two take turns depends on where the pair lives:
- **side by side** (the lab's pair holds no GPU memory and RAM has room for a
  second copy of its buffers): both stay loaded and run each prompt in turn,
  alternating which goes first. A machine whose speed drifts by the minute (a
  shared or throttling one drifts by 20 % here) then weighs on both sides alike.
- **one after the other** (a pair on the GPU, or RAM too short): llama-server
  on every prompt, stopped, then the lab; a pair that fits once need not fit twice.

Both sample with llama.cpp's own code, greedily at temperature 0, and above it with
a sampler seeded per request (llama-server) or per generation (the lab) from the
same --seed; so at temperature 0, or with a fixed seed, the drafted and accepted
counts must be identical prompt by prompt: ``agree``. A random seed (the default)
draws differently on each side, and then nothing is compared. Speeds are
each engine's own measure (the lab: tokens after the first over the cycles'
wall time; llama-server: predicted_n over predicted_ms), and ``ratio`` is
server / lab: with several passes, the median of the passes' ratios.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

from engine.core.chat import Conversation, Prompt
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.core.stats import RunSummary, combine_summaries
from engine.core.workloads import load_workload
from engine.deploy.export import ServerExport, export_llama_server
from engine.llama.install import server_path
from engine.llama.server import LlamaServer, ServerError, server_summary
from engine.measure.generate import generate
from engine.planning.hardware import ram
from engine.planning.memory.budget import held_bytes
from engine.runtime.client import EngineClient, EngineError
from engine.runtime.events import Event, HelloEvent, LoadedEvent
from engine.runtime.protocol import has_gpu_device

_Result = TypeVar("_Result")  # what one side's run of one prompt gives: a summary or llama-server's figures

REQUEST_TIMEOUT_S = 600.0


class ValidateError(RuntimeError):
    """Validation could not run; the message says why."""


class ValidateCancelled(ValidateError):
    """The caller asked validation to stop (StopSwitch.set)."""


class StopSwitch:
    """Stops a validation from another thread: before its next step, and the run under way at once
    (its llama-server is terminated, its lab generation cancelled)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._server: LlamaServer | None = None
        self._client: EngineClient | None = None

    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        self._event.set()
        with self._lock:
            server, client = self._server, self._client
        if client is not None:
            try:
                client.cancel()
            except (EngineError, OSError, ValueError):
                pass  # the worker has gone already, or its pipe closed just now
        if server is not None:
            server.terminate()

    def hold(self, server: LlamaServer | None = None, client: EngineClient | None = None) -> None:
        """What a stop must interrupt now (None: nothing of that kind)."""
        with self._lock:
            self._server, self._client = server, client
        if self.is_set():
            self.set()


class _Steps:
    """Counts the runs, tells the caller where validation is, and stops between runs when asked."""

    def __init__(self, total: int, report: Callable[[int, int, str], None] | None, stop: StopSwitch | None):
        self.total, self.done, self.report, self.stop = total, 0, report, stop

    def check(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise ValidateCancelled("validation cancelled")

    def say(self, what: str) -> None:
        self.check()
        if self.report is not None:
            self.report(self.done, self.total, what)

    def ran(self) -> None:
        self.done += 1

    def finished(self) -> None:
        if self.report is not None:
            self.report(self.total, self.total, "done")

    def hold(self, server: LlamaServer | None = None, client: EngineClient | None = None) -> None:
        if self.stop is not None:
            self.stop.hold(server, client)


def load_prompts(
    workload: str | Path | None = None, prompts: list[str] | None = None, chat: bool = False
) -> list[Prompt]:
    """Prompts from --prompt (repeatable) and/or a workload file (or shipped set name): raw texts, or
    with ``chat`` conversations (a text becomes one user message). A set of conversations is always
    run as conversations."""
    texts = [t for t in (prompts or []) if t.strip()]
    out: list[Prompt] = [Conversation.user(t) if chat else t for t in texts]
    if workload is not None:
        w = load_workload(workload)
        out += w.to_run(chat=chat or w.has_conversations)
    if not out:
        raise ValidateError("no prompts to validate with: give --prompt TEXT or --workload-prompts FILE")
    return out


def prompt_label(prompt: Prompt) -> str:
    """A prompt as the report shows it: the text, or a conversation's newest user message."""
    return prompt if isinstance(prompt, str) else prompt.last_user_text()


def _post_stream(srv: LlamaServer, body: dict, path: str = "/completion") -> list[dict]:
    req = urllib.request.Request(srv.base_url + path, data=json.dumps(body).encode(), method="POST")
    req.add_header("Authorization", f"Bearer {srv.api_key}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
            # read the whole stream, parse it afterwards: JSON work per chunk while the server
            # generates would take CPU from it on a small machine, and its timings stop at its last token
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:500]
        raise ServerError(f"llama-server answered {exc.code} to POST {path}: {detail}") from exc
    chunks = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if line.startswith("data: ") and line != "data: [DONE]":
            chunks.append(json.loads(line[len("data: ") :]))
    return chunks


def server_completion(srv: LlamaServer, prompt: Prompt, n_predict: int) -> dict:
    """One streamed completion in the lab's terms; sampling comes from the server's own flags. A
    conversation goes to the chat endpoint, which applies the model's chat template."""
    started = time.perf_counter()
    body = {"n_predict": n_predict, "stream": True, "timings_per_token": True, "cache_prompt": False}
    if isinstance(prompt, Conversation):
        chunks = _post_stream(srv, {"messages": prompt.messages, **body}, "/v1/chat/completions")
        ended = bool(chunks) and any(ch.get("finish_reason") for ch in chunks[-1].get("choices", []))
        # the text as generated: a template's reasoning part comes first, as the model wrote it
        deltas = [ch.get("delta", {}) for c in chunks for ch in c.get("choices", [])]
        text = "".join(d.get("reasoning_content") or "" for d in deltas) + "".join(
            d.get("content") or "" for d in deltas
        )
    else:
        chunks = _post_stream(srv, {"prompt": prompt, **body})
        ended = bool(chunks) and bool(chunks[-1].get("stop"))
        text = "".join(c.get("content", "") for c in chunks)
    if not ended:
        raise ServerError("llama-server's stream ended without a final chunk")
    timed = [c for c in chunks if "timings" in c]
    if not timed:
        raise ServerError("llama-server sent no timings")
    timings = timed[-1]["timings"]
    summary = server_summary({"timings": timings, "content": text})
    summary["predicted_ms"] = float(timings.get("predicted_ms", 0.0))
    summary["wall_ms"] = round((time.perf_counter() - started) * 1000.0, 3)
    return summary


def _lab_totals(runs: list[dict]) -> dict:
    summed = combine_summaries(runs)
    return {
        key: summed[key]
        for key in (
            "tokens_generated",
            "tokens_per_s",
            "drafted",
            "accepted",
            "acceptance_rate",
            "steps",
            "mean_accepted_length",
            "accepted_by_position",
        )
    }


def _server_totals(runs: list[dict]) -> dict:
    tokens = sum(r["tokens_generated"] for r in runs)
    drafted = sum(r["drafted"] for r in runs)
    accepted = sum(r["accepted"] for r in runs)
    total_ms = sum(r["predicted_ms"] for r in runs)
    return {
        "tokens_generated": tokens,
        "tokens_per_s": round(tokens * 1000.0 / total_ms, 3) if total_ms else 0.0,
        "drafted": drafted,
        "accepted": accepted,
        "acceptance_rate": round(accepted / drafted, 6) if drafted else 0.0,
    }


def _counts(run: dict) -> tuple[int, int]:
    return run["drafted"], run["accepted"]


def _with_metrics(argv: list[str]) -> list[str]:
    return argv + ([] if "--metrics" in argv else ["--metrics"])


def _offloads(hello: HelloEvent, load: LoadSettings) -> bool:
    """The worker has a GPU device and the load puts layers on it."""
    return has_gpu_device(hello) and load.offloads


def _fits_beside(loaded: LoadedEvent) -> bool:
    """Can llama-server hold its own copy while the lab keeps this one? Not when the lab's pair holds
    GPU memory; in RAM, when twice what the lab holds outside the mapped files is available (the
    files' pages are shared between the two processes)."""
    vram, in_ram = held_bytes(loaded["memory"])
    if vram:
        return False
    available = ram()[1]
    return available is not None and 2 * in_ram < available


@dataclasses.dataclass
class _RunPlan:
    """What every run of a validation shares: the knobs, the prompts and how often they run."""

    spec: SpecSettings
    sampling: SamplingSettings
    prompts: list[Prompt]
    max_tokens: int
    passes: int
    startup_timeout: float
    steps: _Steps

    def _run(self, side: str, i: int, j: int, go: Callable[[], _Result]) -> _Result:
        of_passes = f", pass {i + 1} of {self.passes}" if self.passes > 1 else ""
        self.steps.say(f"{side}: prompt {j + 1} of {len(self.prompts)}{of_passes}")
        out = go()
        self.steps.ran()
        return out

    def server_run(self, srv: LlamaServer, i: int, j: int) -> dict:
        """Pass i's prompt j on llama-server."""
        return self._run("llama-server", i, j, partial(server_completion, srv, self.prompts[j], self.max_tokens))

    def lab_run(self, client: EngineClient, i: int, j: int) -> RunSummary:
        """Pass i's prompt j on the lab's engine, cancelled at its first event when a stop came just before
        it was sent (the worker ignores a cancel while it is idle)."""
        cancelled: list[bool] = []
        steps = self.steps

        def check(_ev: Event) -> None:
            if not cancelled and steps.stop is not None and steps.stop.is_set():
                cancelled.append(True)
                client.cancel()

        # the lab's speculators keep learning from one prompt to the next as the one llama-server beside
        # it does (fresh=False): validation holds the two to the same counts, request for request
        go = partial(
            generate, client, self.prompts[j], self.max_tokens, self.spec, self.sampling, on_event=check, fresh=False
        )
        return self._run("lab", i, j, go)


def _one_after_the_other(argv: list[str], load: LoadSettings, plan: _RunPlan) -> dict:
    """Each pass: llama-server on every prompt, stopped, then the lab on the same prompts."""
    done: dict = {"passes": []}
    steps, every = plan.steps, range(len(plan.prompts))
    for i in range(plan.passes):
        steps.say("starting llama-server")
        srv = LlamaServer(argv, startup_timeout=plan.startup_timeout)
        steps.hold(server=srv)  # before it starts: a stop may come while it loads
        with srv:
            if i == 0:
                done["build_info"] = (srv.props() or {}).get("build_info")
            server_runs = [plan.server_run(srv, i, j) for j in every]
            if i == 0:
                done["metrics"], done["metrics_runs"] = srv.metrics(), server_runs
            steps.hold()
        steps.say("starting the lab's engine")
        with EngineClient() as client:
            steps.hold(client=client)
            client.start()
            steps.say("loading the pair in the lab")
            client.load(load)
            lab_runs = [plan.lab_run(client, i, j) for j in every]
            steps.hold()
        done["passes"].append({"server_runs": server_runs, "lab_runs": lab_runs})
    return done


def _side_by_side(argv: list[str], client: EngineClient, plan: _RunPlan) -> dict:
    """Both loaded; every prompt runs on one then the other, and the one that goes first alternates
    prompt by prompt and pass by pass."""
    done: dict = {"passes": []}
    steps = plan.steps
    steps.say("starting llama-server")
    srv = LlamaServer(argv, startup_timeout=plan.startup_timeout)
    steps.hold(server=srv, client=client)  # before it starts: a stop may come while it loads
    with srv:
        done["build_info"] = (srv.props() or {}).get("build_info")
        for i in range(plan.passes):
            server_runs, lab_runs = [], []
            for j in range(len(plan.prompts)):
                order = ("server", "lab") if (i + j) % 2 == 0 else ("lab", "server")
                for side in order:
                    if side == "server":
                        server_runs.append(plan.server_run(srv, i, j))
                    else:
                        lab_runs.append(plan.lab_run(client, i, j))
            done["passes"].append({"server_runs": server_runs, "lab_runs": lab_runs})
        done["metrics"] = srv.metrics()
        done["metrics_runs"] = [r for d in done["passes"] for r in d["server_runs"]]
        steps.hold(client=client)
    return done


def validate(
    load: LoadSettings,
    spec: SpecSettings,
    sampling: SamplingSettings,
    prompts: list[Prompt],
    max_tokens: int,
    *,
    passes: int = 1,
    startup_timeout: float = 180.0,
    sequential: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
    stop: StopSwitch | None = None,
) -> dict:
    """Serve the exported command and run the lab on the same prompts; both summaries side by side.

    Both stay loaded and take turns prompt by prompt when the pair fits twice outside the GPU;
    otherwise, or with ``sequential``, all of llama-server's prompts run before the lab's.

    With ``passes`` > 1 everything is repeated; each side's speed is its median over the passes
    and ``ratio`` the median of the passes' server / lab ratios. Counts and texts shown come
    from the first pass; at temperature 0 or with a fixed seed, server and lab must agree prompt by
    prompt in every pass.

    ``progress(runs done, runs in all, what now)`` is called before each step. ``stop.set()``
    (from any thread) ends validation with ValidateCancelled, at once: the run under way is
    interrupted, and the server and worker are stopped."""
    try:
        return _validate(load, spec, sampling, prompts, max_tokens, passes, startup_timeout, sequential, progress, stop)
    except ValidateCancelled:
        raise
    except Exception as exc:
        if stop is not None and stop.is_set():
            # a stop interrupts the run under way: whatever that run raised is the stop
            raise ValidateCancelled("validation cancelled") from exc
        raise


def _validate(
    load: LoadSettings,
    spec: SpecSettings,
    sampling: SamplingSettings,
    prompts: list[Prompt],
    max_tokens: int,
    passes: int,
    startup_timeout: float,
    sequential: bool,
    progress: Callable[[int, int, str], None] | None,
    stop: StopSwitch | None,
) -> dict:
    if max_tokens < 1:
        raise ValidateError(f"--max-tokens must be 1 or more, got {max_tokens}")
    if passes < 1:
        raise ValidateError(f"--passes must be 1 or more, got {passes}")
    served = _Served(load, export_llama_server(load, spec, sampling, server_path()), [])
    steps = _Steps(2 * passes * len(prompts), progress, stop)
    plan = _RunPlan(spec, sampling, prompts, max_tokens, passes, startup_timeout, steps)
    done = None
    if not sequential:
        done = _try_side_by_side(served, plan)
    mode = "side by side"
    if done is None:
        done = _served_then_lab(served, plan)
        mode = "one after the other"
    lab, server, ratio, by_pass = _speeds(done, passes)
    per_prompt = _per_prompt(prompts, done["passes"][0])
    agree, metrics_agree = _agreement(done, sampling)
    steps.finished()
    return {
        "lab": lab,
        "server": server,
        "agree": agree,
        "ratio": ratio,
        "mode": mode,
        "repack": served.load.repack,
        "metrics_agree": metrics_agree,
        "per_prompt": per_prompt,
        "argv": served.exported.argv,
        "dialect": served.exported.dialect,
        "warnings": served.notices + served.exported.warnings,
        "temperature": sampling.temp,
        "max_tokens": max_tokens,
        "passes": by_pass,
    }


@dataclasses.dataclass
class _Served:
    """The command validated: the load it exports (repacking turned off when the lab's engine could not
    repack), its export, and the notices that say what was changed."""

    load: LoadSettings
    exported: ServerExport
    notices: list[str]


def _try_side_by_side(served: _Served, plan: _RunPlan) -> dict | None:
    """The runs with both sides loaded at once (_side_by_side), or None when the lab's pair goes to the GPU
    or does not fit twice in RAM: then the lab's engine is stopped again before llama-server starts."""
    done, steps = None, plan.steps
    steps.say("starting the lab's engine")
    with EngineClient() as client:
        steps.hold(client=client)
        hello = client.start()
        steps.check()  # a stop while the engine started must not load the pair
        if not _offloads(hello, served.load):
            steps.say("loading the pair in the lab")
            loaded = client.load(served.load)
            if loaded.get("repack") is False and served.load.repack:
                # the lab's engine died of SIGILL with repacking on (AMX the system does not enable):
                # the server's copy would too, so the command validated is the one with -nr
                served.notices.append(loaded["notice"] + "; the validated command has -nr")
                served.load = dataclasses.replace(served.load, repack=False)
                served.exported = export_llama_server(served.load, plan.spec, plan.sampling, server_path())
            if _fits_beside(loaded):
                done = _side_by_side(_with_metrics(served.exported.argv), client, plan)
        steps.hold()
    return done


def _served_then_lab(served: _Served, plan: _RunPlan) -> dict:
    """The runs one after the other (_one_after_the_other), with the advice a llama-server that died of
    SIGILL while repacking needs."""
    load = served.load
    try:
        return _one_after_the_other(_with_metrics(served.exported.argv), load, plan)
    except ServerError as exc:
        if exc.exit_code == -signal.SIGILL and load.repack:
            raise ValidateError(
                f"{exc}\nllama-server died of SIGILL while loading: this CPU announces "
                "instructions (AMX) the system does not enable for CPU weight repacking. "
                "Validate again with weight repacking off (the load's repack setting: --no-repack "
                "on the command line, llama-server's -nr)."
            ) from exc
        raise


def _speeds(done: dict, passes: int) -> tuple[dict, dict, float | None, list[dict]]:
    """The lab's and the server's totals over the first pass's runs, the speed ratio server / lab, and each
    pass's speeds; with several passes the speeds and the ratio are the medians over the passes."""
    first = done["passes"][0]
    lab = _lab_totals(first["lab_runs"])
    server = _server_totals(first["server_runs"])
    by_pass = []
    for d in done["passes"]:
        lab_tps, server_tps = (
            _lab_totals(d["lab_runs"])["tokens_per_s"],
            _server_totals(d["server_runs"])["tokens_per_s"],
        )
        by_pass.append(
            {"lab_tps": lab_tps, "server_tps": server_tps, "ratio": round(server_tps / lab_tps, 4) if lab_tps else None}
        )
    ratio = round(server["tokens_per_s"] / lab["tokens_per_s"], 4) if lab["tokens_per_s"] else None
    if passes > 1:
        lab["tokens_per_s"] = statistics.median(p["lab_tps"] for p in by_pass)
        server["tokens_per_s"] = statistics.median(p["server_tps"] for p in by_pass)
        ratios = [p["ratio"] for p in by_pass if p["ratio"] is not None]
        ratio = round(statistics.median(ratios), 4) if ratios else None
    server["build_info"] = done["build_info"]
    server["metrics"] = done["metrics"]
    return lab, server, ratio, by_pass


def _per_prompt(prompts: list[Prompt], first: dict) -> list[dict]:
    """The first pass's runs, prompt by prompt: each side's counts and speed, and whether the texts match."""
    return [
        {
            "prompt": prompt_label(prompt),
            "chat": isinstance(prompt, Conversation),
            "lab": {k: r[k] for k in ("tokens_generated", "tokens_per_s", "drafted", "accepted")},
            "server": {k: s[k] for k in ("tokens_generated", "tokens_per_s", "drafted", "accepted")},
            "same_text": r["text"] == s["text"],
        }
        for prompt, r, s in zip(prompts, first["lab_runs"], first["server_runs"])
    ]


def _agreement(done: dict, sampling: SamplingSettings) -> tuple[bool | None, bool | None]:
    """Whether the lab and the server drafted and accepted the same counts in every run (None where the
    sampling is not repeatable), and whether the server's /metrics counters match its own runs' (None
    without them)."""
    # greedy sampling or a fixed seed makes the two runs the same computation, in every pass; a pass
    # may differ from the one before (an n-gram pool that outlives a request learns from it on both sides)
    agree = (
        all(_counts(lr) == _counts(sr) for d in done["passes"] for lr, sr in zip(d["lab_runs"], d["server_runs"]))
        if sampling.repeatable
        else None
    )
    metrics = done["metrics"]
    metrics_agree = None
    if metrics and "spec_decode_num_draft_tokens_total" in metrics:
        counted = _server_totals(done["metrics_runs"])  # every request this server answered
        metrics_agree = (
            metrics["spec_decode_num_draft_tokens_total"] == counted["drafted"]
            and metrics.get("spec_decode_num_accepted_tokens_total") == counted["accepted"]
        )
    return agree, metrics_agree


def record_validation(report: dict, load: LoadSettings, spec: SpecSettings, sampling: SamplingSettings) -> int:
    """Store a validation in the history; returns its entry id (HistoryError when it cannot be written).
    The row is indexed by what the server did, since that is what was validated, and carries -nr when
    validation fell back to it."""
    from engine.measure.history import record_summary

    results = {
        "tokens_per_s": report["server"]["tokens_per_s"],
        "acceptance_rate": report["server"]["acceptance_rate"],
        **report,
    }
    return record_summary(
        "validate",
        dataclasses.replace(load, repack=report.get("repack", load.repack)),
        spec,
        sampling,
        results,
        llama_build=report["server"].get("build_info"),
    )


def format_report(report: dict) -> str:
    lab, server = report["lab"], report["server"]
    rows = [
        ("tokens", lab["tokens_generated"], server["tokens_generated"]),
        ("tokens/s", f"{lab['tokens_per_s']:.1f}", f"{server['tokens_per_s']:.1f}"),
        ("drafted", lab["drafted"], server["drafted"]),
        ("accepted", lab["accepted"], server["accepted"]),
        ("acceptance", f"{lab['acceptance_rate']:.3f}", f"{server['acceptance_rate']:.3f}"),
    ]
    lines = [f"{'':<12}{'lab':>12}{'llama-server':>14}"]
    lines += [f"{name:<12}{a!s:>12}{b!s:>14}" for name, a, b in rows]
    agree = report["agree"]
    if agree is None:
        lines.append(
            f"agree: not compared (temperature {report['temperature']:g} with a random seed: sampling differs "
            "run to run; give a seed to compare)"
        )
    else:
        lines.append(
            "agree: "
            + (
                "yes, the same drafted and accepted counts on every prompt"
                if agree
                else "NO, the drafted/accepted counts differ (see --json per_prompt)"
            )
        )
    if report["ratio"] is not None:
        passes = report.get("passes") or []
        each = (
            f" (median of {len(passes)} passes: "
            + ", ".join(f"{p['ratio']:.3f}" for p in passes if p["ratio"] is not None)
            + ")"
            if len(passes) > 1
            else ""
        )
        lines.append(f"llama-server / lab speed: {report['ratio']:.3f}{each}; run {report['mode']}")
    if server.get("build_info"):
        lines.append(f"llama-server build: {server['build_info']}")
    if report.get("metrics_agree") is not None:
        lines.append(
            "/metrics spec-decode counters "
            + ("match" if report["metrics_agree"] else "DIFFER from")
            + " the per-request timings"
        )
    return "\n".join(lines)
