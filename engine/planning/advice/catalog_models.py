"""The catalog's models as the planner sees them: ModelInfo and costs built from each model's published
numbers (engine.planning.advice.model_numbers), memory plans of a pair against a budget, file sizes, quantization
quality and the parameter count that ranks a model's size. The recommender and the presets use it; tests
build catalog models through it."""

from __future__ import annotations

import math

from engine.models.catalog import Catalog, Model, ModelFile
from engine.models.gguf_inspect import ModelInfo
from engine.planning.advice.model_numbers import model_info_from_architecture
from engine.planning.memory.budget import Budget
from engine.planning.memory.memory_plan import KV_PAD, MemoryPlan, plan_memory
from engine.planning.speed.model_cost import ModelCost, model_cost, mtp_cost


class CatalogModels:
    """The catalog's models as the planner sees them, from their published numbers: ModelInfo, costs and memory
    plans per (model, quant), each built once (a 70B model has about 720 tensors)."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self._cache: dict[tuple[str, str], ModelInfo] = {}
        self._alone: dict[tuple[str, str, int], dict[str, int]] = {}
        self._costs: dict[tuple[str, str], ModelCost] = {}
        self._mtp_costs: dict[tuple[str, str], ModelCost | None] = {}

    def info(self, model: Model, quant: str) -> ModelInfo:
        key = (model.id, quant)
        if key not in self._cache:
            q = self.catalog.quant(quant)
            self._cache[key] = model_info_from_architecture(
                model.architecture, q.weight_type, q.bits_per_weight, model.id
            )
        return self._cache[key]

    def cost(self, model: Model, quant: str) -> ModelCost:
        """Bytes and multiply-adds per token, for the speed model."""
        key = (model.id, quant)
        if key not in self._costs:
            self._costs[key] = model_cost(self.info(model, quant))
        return self._costs[key]

    def mtp_cost(self, model: Model, quant: str) -> ModelCost | None:
        """What a pass of the model's own MTP block costs (None: it has none), once per model and quant: a
        target is a candidate with every draft it pairs with."""
        key = (model.id, quant)
        if key not in self._mtp_costs:
            self._mtp_costs[key] = mtp_cost(self.info(model, quant))
        return self._mtp_costs[key]

    def alone(self, budget: Budget, ctx: int, model: Model, quant: str) -> dict[str, int]:
        """Device totals of one model planned alone at ctx tokens."""
        key = (model.id, quant, ctx)
        if key not in self._alone:
            self._alone[key] = plan_memory(self.info(model, quant), ctx, gpus=list(budget.gpus)).device_totals()
        return self._alone[key]

    def pair_totals(self, budget: Budget, ctx: int, target: Model, tq: str, draft: Model, dq: str) -> dict[str, int]:
        """Device totals of target + draft. plan_memory plans the two one after the other and the draft's
        context is the target's padded one, so the pair is the sum of the two planned alone."""
        totals = dict(self.alone(budget, ctx, target, tq))
        kv_size = -(-ctx // KV_PAD) * KV_PAD
        for device, n in self.alone(budget, kv_size, draft, dq).items():
            totals[device] = totals.get(device, 0) + n
        return totals

    def bytes_per_token(self, model: Model, quant: str) -> int:
        """Weight bytes a decode step reads: all of them but the input embeddings (one row is gathered),
        unless the output layer reuses them (tied embeddings); of an MoE model's experts, only the used ones."""
        return self.cost(model, quant).weight_bytes


def estimated_file_bytes(catalog: Catalog, model: Model, quant: str) -> int:
    """The catalog's size when it knows one, else the bytes of the tensors at the quant's bits per weight."""
    if quant in model.sizes:
        return model.sizes[quant]
    return CatalogModels(catalog).info(model, quant).tensor_bytes


def plan_pair(
    models: CatalogModels,
    budget: Budget,
    ctx: int,
    target: Model,
    tq: str,
    draft: Model | None = None,
    dq: str | None = None,
) -> MemoryPlan:
    return plan_memory(
        models.info(target, tq), ctx, draft=models.info(draft, dq) if draft and dq else None, gpus=list(budget.gpus)
    )


def quant_quality(catalog: Catalog, name: str) -> tuple[float, bool]:
    """(perplexity increase on llama.cpp's reference model, whether it is interpolated by bits per weight)."""
    q = catalog.quant(name)
    if q.ppl_increase is not None:
        return q.ppl_increase, False
    # along the K-quant frontier (legacy Q4_0..Q5_1 are worse at the same size): the importance-matrix
    # IQ types do at least as well as a K-quant of their size, so this errs on the cautious side
    known = sorted(
        (k.bits_per_weight, k.ppl_increase)
        for k in catalog.quants
        if k.ppl_increase is not None and ("_K" in k.name or k.name in ("Q8_0", "F16", "BF16"))
    )
    if not known:
        return 0.0, True
    if q.bits_per_weight <= known[0][0]:
        return known[0][1], True
    for (b0, p0), (b1, p1) in zip(known, known[1:]):
        if b0 <= q.bits_per_weight <= b1:
            return p0 + (p1 - p0) * (q.bits_per_weight - b0) / (b1 - b0 or 1), True
    return known[-1][1], True


def size_params(model: Model) -> float:
    """The parameter count the size score uses: the published one for a dense model; for a mixture of
    experts the geometric mean of its total and active parameters, a common rule of thumb for the dense
    model it matches in quality (Qwen3-30B-A3B counts as about 10B, not 30B)."""
    a = model.architecture
    return math.sqrt(a.params * a.active_params) if a.is_moe else a.params


def where_text(f: ModelFile) -> str:
    """Where a catalog file comes from: the bundled path, or the hub repository and file name."""
    return f"{f.bundled_path} (bundled)" if f.bundled else f"{f.repo}/{f.filename}"
