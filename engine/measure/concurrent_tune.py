"""Tuning at the concurrency the user's tools use: each setting served by llama-server with ``-np N``
and N requests at once, paired against no speculation at the same N.

The single-client tuner (engine.measure.tuner) measures in SpecTune's own engine, one stream. With
several clients llama-server verifies their drafts in one batch, and a draft that pays for one
client can cost for four (one reported machine: no speculation 34.1 tok/s in aggregate at -np 4
against 26.4 with MTP drafting, which won at -np 1). So this tune measures through llama-server
itself, as the user will run it:

- Two llama-servers run side by side, started from the argv the export writes with ``-np N`` and a
  ``-c`` that gives each slot the context: one without speculation, one with the candidate. Before any
  starts, the memory plan checks that each fits in half the memory there is (side_by_side_refusal):
  two servers that do not fit would fail to load, or worse, push the machine into swapping.
- A batch is N requests sent at once, one per client, each a different prompt of the workload.
  Each batch runs on one server and then on the other, the order alternating from batch to batch
  (A B, B A). Every request has prompt caching off, so both sides start from the same state.
- A batch's aggregate speed is its generated tokens over its wall time. The ratio of the
  candidate's to the baseline's, batch by batch, gives the median and its interval
  (engine.core.paired), as the single-client verdict does.
- The per-client speed is the median of the requests' own generation speeds (llama-server's timings).

The candidates are no more than a handful, so that every one is measured fully:
- draft-simple at K=2 and K=4 when there is a draft model;
- ngram-mod with llama.cpp's defaults;
- a setting the caller adds (the single-client tune's pick, the Lab's).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.core.chat import Conversation, Prompt
from engine.core.paired import PairedRatio, abba, median_interval
from engine.core.settings import LoadSettings, SamplingSettings, SettingsError, SpecSettings, to_dict
from engine.deploy.export import llama_server_argv
from engine.llama.install import server_path
from engine.llama.server import LlamaServer, ServerError
from engine.measure.candidates import concurrent
from engine.models.gguf_inspect import GGUFInspectError, inspect_gguf
from engine.planning.advice.preflight import preflight_load
from engine.planning.hardware import probe
from engine.planning.memory.budget import Budget
from engine.planning.speed.device_speed import local_device
from engine.planning.speed.model_cost import model_cost
from engine.planning.speed.speed_model import best_concurrent_k, concurrent_speedups

REQUEST_TIMEOUT_S = 600.0
NONE = SpecSettings("none")
SIDE_BY_SIDE = 2  # servers loaded at once: no speculation and the candidate


class ConcurrentTuneCancelled(Exception):
    """The tune was asked to stop; its servers are stopped."""


class ConcurrentTuneError(SettingsError):
    """The tune cannot run with these settings on this machine; the message says what to change."""


def side_by_side_refusal(load: LoadSettings, clients: int, budget: Budget) -> str | None:
    """Why two servers at ``-np clients``, each with ``clients`` slots of ``load.ctx`` tokens, would not fit
    side by side in ``budget``; None when they fit, or when the plan cannot compare (the servers then say)."""
    one = dataclasses.replace(load, ctx=load.ctx * clients)
    too_big = preflight_load(one, budget.share(SIDE_BY_SIDE)).too_big
    if too_big is None:
        return None
    return (
        f"the concurrency tune runs {SIDE_BY_SIDE} llama-servers side by side (no speculation and each candidate), "
        f"each with {clients} slots of {load.ctx} tokens, so each gets half the memory, and one does not fit in half. "
        f"{too_big} Or tune fewer clients."
    )


@dataclass(frozen=True)
class Batch:
    """N requests sent at once to one server."""

    seconds: float
    generated: int
    drafted: int
    accepted: int
    client_speeds: tuple[float, ...]  # each request's own generation speed (llama-server's timings)

    @property
    def aggregate_tps(self) -> float:
        return self.generated / self.seconds if self.seconds > 0 else 0.0


@dataclass
class ConcurrentCandidate:
    spec: SpecSettings
    batches: list[Batch] = field(default_factory=list)
    baseline: list[Batch] = field(default_factory=list)  # no speculation, the same batches, paired
    ratio: PairedRatio | None = None

    @property
    def label(self) -> str:
        return self.spec.label()

    @staticmethod
    def _tps(batches: list[Batch]) -> float:
        secs = sum(b.seconds for b in batches)
        return sum(b.generated for b in batches) / secs if secs else 0.0

    @property
    def aggregate_tps(self) -> float:
        return self._tps(self.batches)

    @property
    def baseline_tps(self) -> float:
        return self._tps(self.baseline)

    @property
    def per_client_tps(self) -> float:
        speeds = [s for b in self.batches for s in b.client_speeds]
        return statistics.median(speeds) if speeds else 0.0

    @property
    def baseline_per_client_tps(self) -> float:
        speeds = [s for b in self.baseline for s in b.client_speeds]
        return statistics.median(speeds) if speeds else 0.0

    @property
    def acceptance(self) -> float | None:
        drafted = sum(b.drafted for b in self.batches)
        return sum(b.accepted for b in self.batches) / drafted if drafted else None

    def to_dict(self) -> dict:
        return {
            "setting": self.label,
            "spec": to_dict(self.spec),
            "aggregate_tps": self.aggregate_tps,
            "baseline_aggregate_tps": self.baseline_tps,
            "per_client_tps": self.per_client_tps,
            "baseline_per_client_tps": self.baseline_per_client_tps,
            "acceptance": self.acceptance,
            "batches": len(self.batches),
            "ratio": self.ratio.to_dict() if self.ratio else None,
        }


@dataclass
class ConcurrentTuneResult:
    clients: int
    candidates: list[ConcurrentCandidate]
    elapsed_s: float
    export_argv: list[str] = field(default_factory=list)  # the pick's llama-server argv at -np N

    @property
    def best(self) -> ConcurrentCandidate:
        return max(self.candidates, key=lambda c: c.ratio.median if c.ratio else 0.0)

    @property
    def beats_baseline(self) -> bool:
        r = self.best.ratio
        return r is not None and r.above_one

    def verdict_text(self) -> str:
        best, r = self.best, self.best.ratio
        if r is None:
            return f"{best.label}: not measured"
        at = f"at {self.clients} concurrent client{'s' if self.clients > 1 else ''}"
        if r.above_one:
            return f"{best.label} beats no speculation {at}: {r.describe()} in aggregate tokens/s"
        how = "is slower" if r.below_one else "is not shown faster (the interval holds x1.00)"
        return f"no setting beats no speculation {at}: the best, {best.label}, {how}: {r.describe()}"

    def to_dict(self) -> dict:
        return {
            "clients": self.clients,
            "candidates": [c.to_dict() for c in self.candidates],
            "best": self.best.to_dict(),
            "beats_baseline": self.beats_baseline,
            "verdict_text": self.verdict_text(),
            "elapsed_s": self.elapsed_s,
            "export_argv": self.export_argv,
        }


# the draft lengths every concurrency tune measures with a draft model, beside the one the speed model predicts
# best for the number of clients
BASE_KS = (2, 4)


def predicted_k(load: LoadSettings, clients: int, nvml=None) -> int | None:
    """The draft length the speed model predicts best for ``clients`` requests at once on this machine's device
    (engine.planning.speed.speed_model.concurrent_speedups: the same batch curve as a single stream, out to a verify of
    clients x (K + 1) tokens); None without a draft model, where no K pays, or where the files cannot be read."""
    if load.draft is None:
        return None
    try:
        target = model_cost(inspect_gguf(load.target))
        draft = model_cost(inspect_gguf(load.draft))
    except (OSError, GGUFInspectError):
        return None
    best = best_concurrent_k(concurrent_speedups(target, draft, local_device(probe(nvml)), clients))
    return best[0] if best else None


def candidate_specs(
    load: LoadSettings, extra: SpecSettings | None = None, predicted: int | None = None
) -> list[SpecSettings]:
    """The settings a concurrency tune measures: draft-simple at BASE_KS and at ``predicted`` (predicted_k) with a
    draft model, ngram-mod, and the user's own setting."""
    ks = sorted({*BASE_KS, *([predicted] if predicted else [])}) if load.draft is not None else []
    specs = concurrent(ks)  # engine.measure.candidates: ngram-mod at the sizes every measurement uses
    if extra is not None and extra.spec_type != "none" and extra not in specs:
        specs.append(extra)
    return specs


def _body(prompt: Prompt, max_tokens: int, sampling: SamplingSettings) -> tuple[str, dict]:
    body = {"cache_prompt": False, "stream": False, "temperature": sampling.temp, "seed": sampling.seed}
    body.update(top_k=sampling.top_k, top_p=sampling.top_p, min_p=sampling.min_p)
    if isinstance(prompt, Conversation):
        return "/v1/chat/completions", {**body, "messages": prompt.messages, "max_tokens": max_tokens}
    return "/completion", {**body, "prompt": prompt, "n_predict": max_tokens}


def _request(server: LlamaServer, prompt: Prompt, max_tokens: int, sampling: SamplingSettings) -> dict:
    path, body = _body(prompt, max_tokens, sampling)
    req = urllib.request.Request(server.base_url + path, json.dumps(body).encode(), method="POST")
    req.add_header("Authorization", f"Bearer {server.api_key}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
            return json.loads(resp.read()).get("timings") or {}
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise ServerError(f"llama-server answered {exc.code} to POST {path}: {detail}") from exc


def run_batch(server: LlamaServer, prompts: list[Prompt], max_tokens: int, sampling: SamplingSettings) -> Batch:
    """The prompts sent at once, one thread per client; timed from the first send to the last answer."""
    timings: list[dict | BaseException] = [{}] * len(prompts)

    def client(i: int) -> None:
        try:
            timings[i] = _request(server, prompts[i], max_tokens, sampling)
        except BaseException as exc:  # noqa: BLE001 - carried to the caller's thread
            timings[i] = exc

    threads = [threading.Thread(target=client, args=(i,), name=f"tune-client-{i}") for i in range(len(prompts))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    for got in timings:
        if isinstance(got, BaseException):
            raise got
    done = [got for got in timings if isinstance(got, dict)]
    return Batch(
        seconds=seconds,
        generated=sum(int(t.get("predicted_n", 0)) for t in done),
        drafted=sum(int(t.get("draft_n", 0)) for t in done),
        accepted=sum(int(t.get("draft_n_accepted", 0)) for t in done),
        client_speeds=tuple(float(t.get("predicted_per_second", 0.0)) for t in done),
    )


def tune_concurrent(
    load: LoadSettings,
    prompts: list[Prompt],
    clients: int,
    *,
    sampling: SamplingSettings | None = None,
    max_tokens: int = 128,
    rounds: int = 2,
    specs: list[SpecSettings] | None = None,
    server: str | Path | None = None,
    progress: Callable[[str], None] = lambda _: None,
    stop: threading.Event | None = None,
    budget: Budget | None = None,
) -> ConcurrentTuneResult:
    """Each candidate against no speculation, both served with -np ``clients``; rounds: how many times every
    prompt is sent (each round's batches walk the prompts from a later start, so batches differ). budget:
    the memory the two servers share (default: this machine's, read now); ConcurrentTuneError when they
    would not fit."""
    if clients < 1:
        raise ValueError(f"clients must be at least 1, not {clients}")
    if not prompts:
        raise ValueError("no prompts to tune on")
    refusal = side_by_side_refusal(load, clients, budget if budget is not None else Budget.from_report(probe()))
    if refusal:
        raise ConcurrentTuneError(refusal[0].upper() + refusal[1:])
    sampling = sampling or SamplingSettings(temp=0.0)
    binary = server if server is not None else server_path()
    specs = specs if specs is not None else candidate_specs(load)
    t0 = time.monotonic()
    batches = _batches(prompts, clients, rounds)
    candidates = []
    for spec in specs:
        cand = ConcurrentCandidate(spec)
        progress(f"{cand.label}: starting two llama-servers at -np {clients} (it and no speculation)")
        argvs = {
            arm: llama_server_argv(load, s, sampling, binary, parallel=clients)
            for arm, s in (("base", NONE), ("cand", spec))
        }
        servers = {arm: LlamaServer(argv) for arm, argv in argvs.items()}
        try:
            for s in servers.values():
                s.start()
            for s in servers.values():  # warm-up: the first request pages the weights in
                run_batch(s, batches[0][:1], 8, sampling)
            for i, batch in enumerate(batches):
                if stop is not None and stop.is_set():
                    raise ConcurrentTuneCancelled("the concurrency tune was stopped")
                for arm in abba(["base", "cand"], i):
                    got = run_batch(servers[arm], batch, max_tokens, sampling)
                    (cand.baseline if arm == "base" else cand.batches).append(got)
                progress(f"{cand.label}: batch {i + 1} of {len(batches)}")
        finally:
            for s in servers.values():
                s.stop()
        ratios = [c.aggregate_tps / b.aggregate_tps for c, b in zip(cand.batches, cand.baseline) if b.aggregate_tps > 0]
        cand.ratio = dataclasses.replace(median_interval(ratios), pairs=("batch", "batches"))
        progress(f"{cand.label}: {cand.ratio.describe()} against no speculation")
        candidates.append(cand)
    result = ConcurrentTuneResult(clients, candidates, time.monotonic() - t0)
    pick = result.best.spec if result.beats_baseline else NONE
    result.export_argv = llama_server_argv(load, pick, sampling, binary, parallel=clients)
    return result


def _batches(prompts: list[Prompt], clients: int, rounds: int) -> list[list[Prompt]]:
    """Batches of ``clients`` prompts; each round starts one prompt later, so a round's batches mix anew."""
    out = []
    n = len(prompts)
    per_round = max(1, n // clients)
    for r in range(rounds):
        for b in range(per_round):
            out.append([prompts[(r + b * clients + c) % n] for c in range(clients)])
    return out
