"""The GPU speed model judged on published llama.cpp measurements, held out, and fitted for the engine.

    .venv/bin/python bench/gpu_prediction.py [--save] [--write]

Data: tests/data/gpu (published rows, each with its source; README there) and the card table
resources/catalog/gpus.json (peak bandwidth and FP16 tensor throughput, sourced). The model's form is
engine.planning.speed.gpu_speed's: a one-token pass costs a fixed time per layer plus the weights' bytes over a share
of the peak bandwidth (one share for float weights, one for quantized); each token beyond the first in a verify
pass adds a share of that read time, scaled by the card's bandwidth over its compute; past 8 tokens quantized
weights step to another kernel.

Every error printed is held out: the constants are fitted again without the rows being judged.
  - leave one GPU out: every row of a card is predicted by a fit on the other cards' rows;
  - leave one source out: every row of a source (a pull request, the CUDA scoreboard, a benchmark repository) by a
    fit on the other sources' rows.
Rows measured on a llama.cpp from before 2025 join the fit with terms of their own (old_build); the engine
predicts the build it ships, without them.
A speculative run on a hybrid target with a separate draft pays for copies of the models' recurrent state each
step at the rate read from one study's timers (gpu_speed.STATE_COPY_MS_PER_MIB); its rows are summarised with and
without that study, and such predictions get a band of their own (speedup_copies).
Judged: plain tokens/s (tg128, or tg512 where a source ran only that), the verify cost ratio cost(b)/cost(1) at b =
2..8 (pp at n_ubatch b), and the speedup of the published speculative runs at their reported acceptance (their
models named in the catalog's terms; none of these enter any fit). Goals (issue 49): median |error| <= 10 % for
plain tok/s and for the verify ratio under leave-one-GPU-out, <= 0.10 for the speedup; the exit status is 1 when one
is missed. The old model (65 % of peak plus 0.3 ms a pass, a roofline) is printed beside it on the same rows.

A published row gives the model as llama-bench prints it ("llama 7B Q4_0", 3.56 GiB, 6.74 B): its layers and
shapes are the catalog's model of that architecture nearest in size (engine.planning.advice.named_models), its bytes
the row's size. --write fits on every row and writes resources/catalog/gpu_speed.json with the held-out errors
that set the bands GPU predictions show.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.paired import append_result  # noqa: E402
from engine.models.catalog import Catalog, load_catalog  # noqa: E402
from engine.planning.advice.named_models import NamedModelError, described, resolve  # noqa: E402
from engine.planning.speed.device_speed import has_tensor_cores, tensor_tflops  # noqa: E402
from engine.planning.speed.gpu_speed import FAMILIES, GPU_FIT, GpuFit, family, matrix_bytes_by_type, weights_in  # noqa: E402
from engine.planning.speed.gpu_table import GpuSpec, GpuTableError, candidates, find_gpu, load_gpus  # noqa: E402
from engine.planning.speed.model_cost import ModelCost, model_cost, mtp_cost  # noqa: E402
from engine.planning.speed.prediction_band import SPEEDUP_KINDS  # noqa: E402
from engine.planning.speed.speed_model import predict  # noqa: E402

DATA = REPO / "tests" / "data" / "gpu"
GOAL_RATIO = 0.10
GOAL_SPEEDUP = 0.10
BAND_MIN_ROWS = 10  # fewer held-out errors than this: a band is their worst, not their 90th percentile
GIB = 2**30
N_PAST = 64  # tg128's mean position after a short prompt; the KV cache is under 1 % of the bytes there
VERIFY_RANGE = range(2, 9)
# quants as llama-bench prints them, in the catalog's names
QUANT_NAMES = {"Q4_K - Medium": "Q4_K_M", "Q4_K - Small": "Q4_K_S", "Q2_K - Medium": "Q2_K", "Q2_K_M": "Q2_K"}
QUANT_NAMES |= {"Q3_K - Small": "Q3_K_S", "Q5_K - Medium": "Q5_K_M", "Q6_K": "Q6_K", "Q4_K": "Q4_K_M"}
QUANT_NAMES |= {"MXFP4": "MXFP4_MOE", "F32": "F16"}


@dataclass
class Case:
    """One published measurement, costed: a plain row (tg128) or a small-batch curve."""

    kind: str  # "plain" | "curve"
    label: str
    gpu: str  # the card's table name: the leave-one-GPU-out group
    source: str  # the leave-one-source-out group
    spec: GpuSpec
    cost: ModelCost
    one_ms: float  # a one-token pass, measured
    ratios: dict[int, float] = field(default_factory=dict)  # curve: cost(b) / cost(1), measured
    old: bool = False  # a plain row measured on a llama.cpp build from before 2025 (old_build)

    @property
    def bandwidth(self) -> float:
        return float(self.spec.bandwidth_gb_s or 0) * 1e9


# -- costing a published row -----------------------------------------------------------------------------------


def _quant(text: str | None) -> str | None:
    if not text:
        return None
    return QUANT_NAMES.get(text, text.upper())


# a printed model label: "llama 7B Q4_0", "LLaMA 7B F16 (open-llama 7B-v2)", "Llama-3.2-3B Q4_K"
_LABEL = re.compile(r"^([A-Za-z][A-Za-z0-9-]*?)[- ](?:\d+(?:\.\d+)?-)?(\d+(?:\.\d+)?)B\b")
# a row without a size is costed as the catalog's nearest model of its architecture within this much (CodeLlama
# 34B as Mistral Small's 23.6B), its bytes scaled by the parameter counts
LABEL_TOLERANCE = 0.5


def row_cost(row: dict, catalog: Catalog) -> ModelCost | str:
    """The model of a published row, or why it cannot be costed: the catalog's nearest model of its architecture
    and size for the layers and shapes; its bytes are the row's file size where it prints one, else the catalog
    model's scaled by the parameter counts. The architecture and size come from the row's fields, else from the
    model label llama-bench printed ("llama 7B Q4_0": llama, 7B)."""
    quant = _quant(row.get("quant"))
    arch, params = row.get("architecture"), row.get("params_b")
    label = _LABEL.match(row.get("model", ""))
    if label and (arch is None or params is None):
        arch, params = arch or label.group(1).lower(), params or float(label.group(2))
    if quant is None or arch is None or params is None:
        return "no architecture, parameter count or quant"
    try:
        named = described(catalog, arch, f"{params}B", quant, tolerance=LABEL_TOLERANCE)
    except (NamedModelError, ValueError) as exc:
        return str(exc).split(";")[0]
    cost = model_cost(named.info)
    size = row.get("size_gib")
    if size:
        scale = size * GIB / named.info.tensor_bytes
    else:
        scale = params * 1e9 / catalog_params(named)
    return dataclasses.replace(
        cost,
        weight_bytes=int(cost.weight_bytes * scale),
        by_class=tuple((c, int(b * scale), m) for c, b, m in cost.by_class),
        expert_bytes_by_class=tuple((c, int(b * scale)) for c, b in cost.expert_bytes_by_class),
        bytes_by_type=tuple((t, int(b * scale)) for t, b in cost.bytes_by_type),
        output_bytes=int(cost.output_bytes * scale),
    )


def without_output(cost: ModelCost) -> ModelCost:
    """A prompt pass's cost: llama.cpp computes the logits of a prompt's last token only, so a pp test at n_ubatch
    b reads the output layer in one pass of many (a 1B model's tied 128256-row output is a fifth of its bytes)."""
    types = dict(cost.bytes_by_type)
    if cost.output_type in types:
        types[cost.output_type] -= cost.output_bytes
    return dataclasses.replace(
        cost, weight_bytes=cost.weight_bytes - cost.output_bytes, bytes_by_type=tuple(types.items()), output_bytes=0
    )


def catalog_params(named: object) -> float:
    """The parameter count of the catalog model a described model stands for (its label names it)."""
    model_id = str(named.label).split(" ")[0]
    return float(load_catalog().model(model_id).architecture.params)


def _card(name: str, specs: tuple[GpuSpec, ...]) -> GpuSpec | str:
    """The row's card, or why none: a name that fits variants of one bandwidth ("Tesla V100": PCIe or SXM2, 16 or 32
    GB, all 900 GB/s) is the first of them, as the plain model reads nothing else; one that fits several
    bandwidths ("H100 80 GB": PCIe or SXM) is left out."""
    try:
        spec = find_gpu(name, specs)
    except GpuTableError as exc:
        fits = candidates(name, specs)
        if fits and len({g.bandwidth_gb_s for g in fits}) == 1:
            return fits[0]
        return str(exc)
    if not spec.bandwidth_gb_s:
        return f"no bandwidth for the {spec.label}"
    return spec


# float weights of 2..16 tokens run the tensor-core MMF kernel in the pinned llama.cpp (ggml-cuda/mmf.cu), which
# arrived with llama.cpp PR 15131 ("cuda-mmf-2", August 2025); a float curve from an earlier pull request ran
# cuBLAS or the vector kernel at every batch size, another program's cost
MMF_PR = 15131
_PR = re.compile(r"llama\.cpp/(?:pull|issues)/(\d+)")


def _pr_number(source: str) -> int | None:
    m = _PR.search(source)
    return int(m.group(1)) if m else None


def _left_out(row: dict, kind: str) -> str | None:
    if row.get("gpu_count", 1) != 1:
        return f"{row['gpu_count']} GPUs"
    if "WEAK LABEL" in (row.get("caveats") or ""):
        return "weak label (quant or device not read)"
    if "SUPERSEDED" in (row.get("caveats") or ""):
        return "the baseline of a change that merged: kernels it replaced"
    pr = _pr_number(row.get("source", ""))
    if kind == "curve" and _quant(row.get("quant")) in ("F16", "BF16") and (pr is None or pr < MMF_PR):
        return f"a float curve from before MMF (PR {pr}): kernels the pinned build no longer runs"
    return None


# llama.cpp's build number at the start of 2025, and its pull requests' numbering then: a row's build, else its date,
# else its thread, says whether it ran a build from before 2025 (CUDA graphs came in May 2024, much kernel work after)
BUILD_2025 = 4400
PR_2025 = 11000


def old_build(row: dict) -> bool:
    """Whether a plain row ran a llama.cpp from before 2025: its build number where it prints one ("4426e298
    (2824)"), else its date, else a llama.cpp thread number from before then; unknown is taken for new."""
    number = re.search(r"\((\d+)\)", row.get("build") or "")
    if number:
        return int(number.group(1)) < BUILD_2025
    if row.get("date"):
        return str(row["date"]) < "2025"
    pr = _pr_number(row.get("source", ""))
    return pr is not None and pr < PR_2025


def source_group(url: str) -> str:
    """The leave-one-source-out group of a row: its repository for a file at a commit (one notebook per card of
    one benchmark repo is one source, not one each), else its thread."""
    return url.split("/blob/")[0] if "/blob/" in url else url.split("#")[0]


def load_cases(
    catalog: Catalog, specs: tuple[GpuSpec, ...], skipped: list[str], device_runs: bool = False
) -> list[Case]:
    """The published rows (device_runs: SpecTune's own rows from lent devices instead, kind "plain")."""
    cases = []
    if device_runs:
        path = DATA / "device_runs.json"
        sets = [("plain", json.loads(path.read_text())["rows"] if path.exists() else [])]
    else:
        plain = json.loads((DATA / "plain_decode.json").read_text())["rows"]
        curves = json.loads((DATA / "batch_curves.json").read_text())["curves"]
        sets = [("plain", plain), ("curve", curves)]
    for kind, rows in sets:
        for row in rows:
            label = f"{row['gpu'][:24]:<24} {row['model'][:30]:<30}"
            why = _left_out(row, kind)
            spec = None if why else _card(row["gpu"], specs)
            if isinstance(spec, str):
                why = spec
            cost = None if why else row_cost(row, catalog)
            if isinstance(cost, str):
                why = cost
            if why:
                skipped.append(f"{kind} {label}: {why}")
                continue
            assert isinstance(spec, GpuSpec) and isinstance(cost, ModelCost)
            if kind == "curve":
                cost = without_output(cost)
            if kind == "plain":
                one_ms, ratios = 1000.0 / row["tokens_per_s"], {}
            else:
                tps = {int(b): float(t) for b, t in row["tokens_per_s_by_batch"].items()}
                if 1 not in tps:
                    skipped.append(f"{kind} {label}: no batch of 1")
                    continue
                one_ms = 1000.0 / tps[1]
                ratios = {b: (b / t) / (1 / tps[1]) for b, t in tps.items() if b > 1}
            old = kind == "plain" and old_build(row)
            cases.append(Case(kind, label, spec.name, source_group(row["source"]), spec, cost, one_ms, ratios, old))
    return cases


# -- the fit ----------------------------------------------------------------------------------------------------


def _nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient kept at zero or above (a handful of unknowns: drop the most negative
    and solve again)."""
    active = list(range(a.shape[1]))
    x = np.zeros(a.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(a[:, active], y, rcond=None)
        if (sol >= 0).all():
            x[:] = 0
            x[active] = sol
            return x
        active.pop(int(np.argmin(sol)))
    return x


def _reads_ms(case: Case) -> dict[str, float]:
    """ms to read each family's weights at the card's full peak bandwidth (the rest of the bytes with float)."""
    out = dict.fromkeys(FAMILIES, 0.0)
    matrix = 0
    for type_name, n in matrix_bytes_by_type(case.cost):
        out[family(type_name)] += 1000.0 * n / case.bandwidth
        matrix += n
    out["float"] += 1000.0 * (case.cost.bytes_read(N_PAST) - matrix) / case.bandwidth
    return out


GENERATIONS = ("Pascal", "Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell")
# the generation terms are shrunk toward 0 with this weight against rows whose residuals are relative errors:
# fixed before judging (0.3, 1, 3 and 10 gave held-out medians of 8.2, 8.2, 8.9 and 9.8 % on 2026-12-06's rows)
RIDGE = 1.0


def fit_plain(cases: list[Case]) -> GpuFit:
    """Efficiency by family, ms per layer, generation terms and the old builds' terms minimising the relative
    error of the one-token pass: time = layers x layer_ms + sum over families of bytes / peak x (1 / efficiency +
    the generation's term for the quantized ones), plus for a row from an old build layers x its extra ms and all
    bytes / peak x its extra; linear in its unknowns, the generation and old-build terms shrunk toward 0 (RIDGE).
    A family no row reads takes the mean of the others. Without the old-build terms (2026-12-07, 111 rows) the
    held-out medians were 9.0 % (one GPU out) and 14.3 % (one source out), 7.5 and 12.8 % with them."""
    rows = []
    for c in cases:
        reads = _reads_ms(c)
        quant = reads["legacy"] + reads["kquant"]
        gen = [quant * (c.spec.generation == g) for g in GENERATIONS]
        old = [sum(reads.values()) * c.old, c.cost.n_layers * c.old]
        moe = c.cost.n_layers * bool(c.cost.expert_share)
        rows.append(np.array([c.cost.n_layers, *(reads[f] for f in FAMILIES), *gen, *old, moe]) / c.one_ms)
    a = np.array(rows)
    shrunk = len(GENERATIONS) + 2
    penalty = np.zeros((shrunk, a.shape[1]))
    for i in range(shrunk):
        penalty[i, 1 + len(FAMILIES) + i] = RIDGE
    x, *_ = np.linalg.lstsq(np.vstack([a, penalty]), np.concatenate([np.ones(len(rows)), np.zeros(shrunk)]))
    inv = {f: float(x[1 + i]) for i, f in enumerate(FAMILIES)}
    seen = [f for f in FAMILIES if inv[f] > 0 and any(_reads_ms(c)[f] > 0.3 * c.one_ms for c in cases)]
    fallback = statistics.mean(inv[f] for f in seen)
    eff = {f: 1.0 / (inv[f] if f in seen else fallback) for f in FAMILIES}
    deltas = {g: round(float(x[1 + len(FAMILIES) + i]), 4) for i, g in enumerate(GENERATIONS)}
    old_terms = {"inverse_efficiency": round(float(x[-3]), 4), "layer_ms": round(float(x[-2]), 5)}
    moe_ms = max(round(float(x[-1]), 5), 0.0)
    return GpuFit(eff, max(float(x[0]), 0.0), {}, generation_delta=deltas, old_build=old_terms, moe_layer_ms=moe_ms)


# the batch sizes the per-weight cost is fitted on: the vector kernels' range, which the form describes (past 8
# MMQ takes over; fitted out to 16 the A100's jump at 9 pulled the cost up: 7.3 % held out against 6.6 %)
FIT_MAX_BATCH = 8


def fit_batch(cases: list[Case], base: GpuFit) -> GpuFit:
    """The operations per weight by family minimising the squared error of the verify ratio at every published b
    from 2 to FIT_MAX_BATCH, the one-token pass as the plain fit prices it: ratio - 1 = sum over families of
    ops x the family's weights x (b - 1) / the card's FP16 rate / the one-token pass, linear in the ops."""
    rows, y = [], []
    for c in cases:
        # the cost is in units of the card's FP16 tensor rate: a card without a figure read for it (a guess by
        # compute capability stands in when predicting) cannot teach it
        if c.kind != "curve" or not c.spec.fp16_tensor_tflops:
            continue
        one = predicted_one_ms(base, c)
        weights = dict.fromkeys(FAMILIES, 0.0)
        for type_name, n in matrix_bytes_by_type(c.cost):
            weights[family(type_name)] += weights_in(type_name, n)
        per_token = [1000.0 * weights[f] / _flops(c, base) / one for f in FAMILIES]
        for b, r in c.ratios.items():
            if 2 <= b <= FIT_MAX_BATCH:
                rows.append([w * (b - 1) for w in per_token])
                y.append(r - 1.0)
    if not rows:
        return base
    x = _nnls(np.array(rows), np.array(y))
    fams = [f for i, f in enumerate(FAMILIES) if any(r[i] for r in rows)]
    return dataclasses.replace(base, token_ops={f: round(float(x[FAMILIES.index(f)]), 3) for f in fams})


def _no_tensor(c: Case) -> bool:
    return c.kind == "curve" and not has_tensor_cores(c.spec.compute_capability)


def fit_no_tensor(cases: list[Case], base: GpuFit) -> GpuFit:
    """The rate of a card without tensor cores, in token_ops' units: least squares over the curves of such cards
    (Pascal's) at b = 2 to FIT_MAX_BATCH, token_ops as the cards with tensor cores fixed them. The verify ratio
    less one is linear in the rate's inverse. None (the compute capability's guess stands) without such a curve."""
    xs, ys = [], []
    for c in filter(_no_tensor, cases):
        one = predicted_one_ms(base, c)
        ops = sum(base.token_ops.get(family(t), 0.0) * weights_in(t, n) for t, n in matrix_bytes_by_type(c.cost))
        for b, r in c.ratios.items():
            if 2 <= b <= FIT_MAX_BATCH:
                xs.append(1000.0 * ops * (b - 1) / one)
                ys.append(r - 1.0)
    x, y = np.array(xs), np.array(ys)
    if not xs or float(x @ y) <= 0:
        return dataclasses.replace(base, no_tensor_tflops=None)
    return dataclasses.replace(base, no_tensor_tflops=round(float(x @ x) / float(x @ y) / 1e12, 2))


def fit(cases: list[Case]) -> GpuFit:
    return fit_no_tensor(cases, fit_batch(cases, fit_plain([c for c in cases if c.kind == "plain"])))


# -- predictions -------------------------------------------------------------------------------------------------


def predicted_one_ms(f: GpuFit, c: Case) -> float:
    ms = f.forward_ms(c.cost, 1, N_PAST, c.bandwidth, _flops(c, f), c.spec.generation)
    if c.old:  # the row's own, older build (GpuFit.old_build)
        ms += f.old_build.get("layer_ms", 0.0) * c.cost.n_layers
        ms += f.old_build.get("inverse_efficiency", 0.0) * sum(_reads_ms(c).values())
    return ms


def predicted_ratio(f: GpuFit, c: Case, b: int) -> float:
    ms = f.forward_ms(c.cost, b, N_PAST, c.bandwidth, _flops(c, f), c.spec.generation)
    return ms / predicted_one_ms(f, c)


def _flops(c: Case, f: GpuFit) -> float:
    """The card's rate in token_ops' units as the engine takes it (device_speed.tensor_tflops)."""
    return tensor_tflops(c.spec.fp16_tensor_tflops, c.spec.compute_capability, f)[0] * 1e12


def old_model_one_ms(c: Case) -> float:
    """The model before this bench (device_speed as of 2026-12-05): 65 % of peak, 0.3 ms a pass, a roofline."""
    return 0.3 + 1000.0 * c.cost.bytes_read(N_PAST) / (0.65 * c.bandwidth)


@dataclass
class Errors:
    plain: list[tuple[Case, float]] = field(default_factory=list)
    verify: list[tuple[Case, int, float]] = field(default_factory=list)


def held_out(cases: list[Case], key: Callable[[Case], str], fitter: Callable[[list[Case]], GpuFit]) -> Errors:
    out = Errors()
    for group in sorted({key(c) for c in cases}):
        train = [c for c in cases if key(c) != group]
        test = [c for c in cases if key(c) == group]
        if not train:
            continue
        f = fitter(train)
        for c in test:
            if c.kind == "plain":
                out.plain.append((c, c.one_ms / predicted_one_ms(f, c) - 1.0))
            for b, r in c.ratios.items():
                if b in VERIFY_RANGE:
                    out.verify.append((c, b, predicted_ratio(f, c, b) / r - 1.0))
    return out


# -- speculative runs ----------------------------------------------------------------------------------------------


def acceptance_from_rate(rate: float, k: int) -> float:
    """The per-position acceptance a whose accepted/drafted rate at K draft tokens is ``rate``: sum a^i / K."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        a = (lo + hi) / 2
        got = sum(a**i for i in range(1, k + 1)) / k
        lo, hi = (a, hi) if got < rate else (lo, a)
    return (lo + hi) / 2


def speculative_errors(
    catalog: Catalog, specs: tuple[GpuSpec, ...], f: GpuFit, lines: list[str]
) -> list[tuple[float, bool, str]]:
    """Predicted against published speedups at the reported acceptance (rate over the drafted tokens, turned into a
    per-position chance at draft-max), on rows whose models the catalog names; none of these rows is fitted on.
    Each error comes with whether its row is from the study the state-copy rate was read from (copy_rate_source:
    gpu_speed.STATE_COPY_MS_PER_MIB), which the report also summarises without, and whether its prediction
    copies a hybrid model's state or drafts with the target's MTP block: the kind of run, which sets a band of its
    own (prediction_band.SPEEDUP_KINDS)."""
    from engine.planning.speed.device_speed import gpu_device
    from engine.planning.speed.gpu_table import described_report

    rows = json.loads((DATA / "speculative_runs.json").read_text())["rows"]
    errors = []
    lines.append(
        f"{'gpu':<24} {'target + draft':<44} {'K':>2} {'acc':>5} {'measured':>8} {'predicted':>9} {'error':>6}"
    )
    for row in rows:
        label = f"{row['gpu'][:24]:<24} {(row.get('target_named') or row['target'])[:21]:<21} + "
        label += f"{(row.get('draft_named') or row['draft'])[:20]:<20}"
        why = row.get("left_out")  # the data's own reason (the dataset's README)
        if why is None and (not row.get("target_named") or not row.get("draft_named")):
            why = "its models are not in the catalog's terms (target_named / draft_named)"
        elif why is None and row.get("acceptance") is None:
            why = "no acceptance reported"
        elif why is None and (row.get("gpu_count", 1) != 1 or "Vulkan" in row.get("tool", "")):
            why = "not one GPU on CUDA"
        spec = None if why else _card(row["gpu"], specs)
        if isinstance(spec, str):
            why = spec
        if why:
            lines.append(f"  left out: {label}: {why}")
            continue
        assert isinstance(spec, GpuSpec)
        target_info = resolve(row["target_named"], catalog).info
        target = model_cost(target_info)
        # "mtp": the target's own MTP block drafts (draft-mtp), as the recommendations price it
        draft = (
            mtp_cost(target_info)
            if row["draft_named"] == "mtp"
            else model_cost(resolve(row["draft_named"], catalog).info)
        )
        if draft is None:
            lines.append(f"  left out: {label}: the catalog's model has no MTP block")
            continue
        device = gpu_device(described_report(spec, 1, cpu=None), fit=f)
        k = int(row["draft_max"])
        a = acceptance_from_rate(float(row["acceptance"]), k)
        p = predict(target, draft, device, acceptance=a, k_max=max(k, 1))
        # the suite's tokens over its time where the source gives both: its acceptance is summed the same way
        measured = row.get("speedup_suite") or row["speedup"]
        err = p.speedup_by_k[k] - measured
        line = f"{label} {k:2d} {row['acceptance']:5.2f} {measured:8.2f} {p.speedup_by_k[k]:9.2f} {err:+6.2f}"
        if row.get("set_aside"):
            lines.append(f"{line}  set aside (not in the median or the band): {row['set_aside']}")
            continue
        kind = "speedup_mtp" if p.method == "draft-mtp" else "speedup_copies" if p.checkpoint_ms > 0 else "speedup"
        errors.append((err, bool(row.get("copy_rate_source")), kind))
        lines.append(line + ("  (the copy rate's study)" if row.get("copy_rate_source") else ""))
    return errors


# -- the report ----------------------------------------------------------------------------------------------------


def _summary(name: str, errors: Iterable[float], goal: float, relative: bool = True) -> tuple[bool, str, float]:
    errs = list(errors)
    if not errs:
        return False, f"{name}: nothing could be predicted", 0.0
    med = statistics.median(abs(e) for e in errs)
    worst = max(errs, key=abs)
    q90 = float(np.quantile([abs(e) for e in errs], 0.9))
    unit = (lambda v: f"{100 * v:.1f} %") if relative else (lambda v: f"{v:.3f}")
    signed = (lambda v: f"{100 * v:+.1f} %") if relative else (lambda v: f"{v:+.3f}")
    ok = med <= goal
    text = (
        f"{name}: {len(errs)} held out, median |error| {unit(med)} (goal {unit(goal)}: {'met' if ok else 'MISSED'}), "
        f"90th percentile {unit(q90)}, worst {signed(worst)}, mean {signed(statistics.mean(errs))}"
    )
    return ok, text, q90


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--save", action="store_true", help="append the report to bench/results/gpu_prediction.txt")
    ap.add_argument("--write", action="store_true", help=f"write the fit on every row to {GPU_FIT.relative_to(REPO)}")
    a = ap.parse_args()
    catalog, specs = load_catalog(), load_gpus()
    skipped: list[str] = []
    cases = load_cases(catalog, specs, skipped)
    n_plain = sum(c.kind == "plain" for c in cases)
    lines = [
        f"# {time.strftime('%Y-%m-%d %H:%M')} GPU speed model on tests/data/gpu: {n_plain} plain rows and "
        f"{len(cases) - n_plain} curves on {len({c.gpu for c in cases})} cards ({len(specs)} in the table), "
        f"{len({c.source for c in cases})} sources"
    ]
    by_gpu = held_out(cases, lambda c: c.gpu, fit)
    by_source = held_out(cases, lambda c: c.source, fit)
    lines.append("## plain decode, leave one GPU out (tg128 tokens/s; error = predicted / measured - 1)")
    lines.append(f"{'gpu':<24} {'model':<30} {'measured':>8} {'predicted':>9} {'error':>7} {'old model':>9}")
    for c, e in sorted(by_gpu.plain, key=lambda t: t[1]):
        old = c.one_ms / old_model_one_ms(c) - 1
        lines.append(
            f"{c.label} {1000 / c.one_ms:8.1f} {1000 / c.one_ms * (1 + e):9.1f} {100 * e:+6.1f}% {100 * old:+8.1f}%"
        )
    lines.append("## verify cost ratio cost(b)/cost(1), leave one GPU out")
    lines.append(f"{'gpu':<24} {'model':<30} " + " ".join(f"{'b=' + str(b):>11}" for b in VERIFY_RANGE))
    for c in [c for c in cases if c.kind == "curve"]:
        errs = {b: e for cc, b, e in by_gpu.verify if cc is c}
        cells = [
            f"{c.ratios[b]:4.2f}/{c.ratios[b] * (1 + errs[b]):4.2f}" if b in errs else f"{'':>9}" for b in VERIFY_RANGE
        ]
        lines.append(f"{c.label} " + " ".join(f"{x:>11}" for x in cells))
    lines.append("  (each cell: measured/predicted)")
    lines += [f"  left out: {s}" for s in skipped]
    full = fit(cases)
    lines.append(
        "## fit on every row: efficiency "
        + ", ".join(f"{k} {v:.3f}" for k, v in full.efficiency.items())
        + f"; {1000 * full.layer_ms:.1f} us a layer; ops per weight a further token "
        + ", ".join(f"{k} {v:.3f}" for k, v in full.token_ops.items())
        + "; generation terms "
        + ", ".join(f"{k} {v:+.3f}" for k, v in full.generation_delta.items())
        + f"; a build from before 2025 (on {sum(c.old for c in cases)} rows) "
        + f"{1000 * full.old_build.get('layer_ms', 0.0):+.1f} us a layer, "
        + f"{full.old_build.get('inverse_efficiency', 0.0):+.3f} on 1 / efficiency"
        + f"; a layer of routed experts {1000 * full.moe_layer_ms:+.1f} us"
        + f"; a card without tensor cores {full.no_tensor_tflops} TFLOPs in token_ops' units "
        + f"(fitted on {sum(map(_no_tensor, cases))} Pascal curves; judged on the GTX 1080 Ti's speculative row)"
    )
    lines.append("## SpecTune's own rows from lent GPUs (tests/data/gpu/device_runs.json; fit on every published row)")
    device_cases = load_cases(catalog, specs, [], device_runs=True)
    for c in device_cases:
        e = c.one_ms / predicted_one_ms(full, c) - 1
        lines.append(f"{c.label} {1000 / c.one_ms:8.1f} {1000 / c.one_ms * (1 + e):9.1f} {100 * e:+6.1f}%  {c.source}")
    if not device_cases:
        lines.append("  none yet: bench/gpu_device_rows.py adds a bench/gpu_check.sh run's rows")
    lines.append("## speculative runs at their reported acceptance (fit on every plain row and curve)")
    spec_errors = speculative_errors(catalog, specs, full, lines)
    old_errors = [c.one_ms / old_model_one_ms(c) - 1 for c, _ in by_gpu.plain]
    ok_plain, text, q_plain = _summary("plain tok/s, leave one GPU out", (e for _, e in by_gpu.plain), GOAL_RATIO)
    lines.append(text)
    lines.append(_summary("plain tok/s, leave one source out", (e for _, e in by_source.plain), GOAL_RATIO)[1])
    lines.append(_summary("plain tok/s, the old model on the same rows", old_errors, GOAL_RATIO)[1])
    ok_verify, text, q_verify = _summary(
        "verify ratio b=2..8, leave one GPU out", (e for *_, e in by_gpu.verify), GOAL_RATIO
    )
    lines.append(text)
    lines.append(
        _summary("verify ratio b=2..8, leave one source out", (e for *_, e in by_source.verify), GOAL_RATIO)[1]
    )
    ok_spec, text, _ = _summary("speculative speedup", [e for e, *_ in spec_errors], GOAL_SPEEDUP, relative=False)
    lines.append(text)
    apart = [e for e, same_study, _ in spec_errors if not same_study]
    lines.append(_summary("speculative speedup, without the copy rate's study", apart, GOAL_SPEEDUP, False)[1])
    bands = {}
    names = {"speedup": "a separate draft", "speedup_copies": "state copies", "speedup_mtp": "an MTP block"}
    for key in SPEEDUP_KINDS:
        errs = [e for e, _, kind in spec_errors if kind == key]
        if not errs:  # no band rather than 0: gpu_band falls back to the separate draft's
            continue
        name = names[key]
        text, bands[key] = _summary(f"speculative speedup, {name}", errs, GOAL_SPEEDUP, relative=False)[1:]
        if len(errs) < BAND_MIN_ROWS:  # a 90th percentile of a few errors is an extrapolation: the worst stands
            bands[key] = max(abs(e) for e in errs)
            text += f"; {len(errs)} rows, too few for a 90th percentile: the band is the worst, {bands[key]:.3f}"
        lines.append(text)
    print("\n".join(lines))
    if a.save:
        append_result("gpu_prediction.txt", lines)
    if a.write:
        band = {"plain": round(q_plain, 3), "verify": round(q_verify, 3)} | {k: round(v, 3) for k, v in bands.items()}
        source = (
            f"bench/gpu_prediction.py {time.strftime('%Y-%m-%d')}: fitted on {n_plain} plain rows and "
            f"{len(cases) - n_plain} curves of tests/data/gpu; bands = 90th percentile of the held-out |errors| "
            "(leave one GPU out; speedup: the published speculative runs)"
        )
        out = dataclasses.replace(full, band=band, source=source)
        GPU_FIT.write_text(json.dumps({"format": 1, "fit": out.to_dict()}, indent=2) + "\n", encoding="utf-8")
        print(f"# wrote {GPU_FIT}")
    return 0 if ok_plain and ok_verify and ok_spec else 1


if __name__ == "__main__":
    raise SystemExit(main())
