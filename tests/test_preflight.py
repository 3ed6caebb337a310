"""The one pre-load check (engine.planning.advice.preflight) on real synthetic pairs: files, vocabularies, memory."""

from __future__ import annotations

from engine.models.gguf_inspect import inspect_gguf
from engine.planning.advice.preflight import FILE, MEMORY, NO_PLAN, VOCAB, preflight
from engine.planning.hardware import probe
from engine.planning.memory.budget import Budget
from engine.planning.memory.fit import check_fit
from engine.planning.memory.memory_plan import GpuBudget

from .fake_nvml import FakeNVML, rtx4090


def test_a_pair_that_fits_has_no_reasons(pair):
    check = preflight(pair[0], pair[1], 2048, Budget.from_report(probe(FakeNVML([rtx4090(0)]))))
    assert check.reasons == [] and check.refusal is None and check.too_big is None
    assert check.compat == {"compatible": True, "reasons": []} and check.fit is not None and check.fit.fits is True
    assert check.target is not None and check.draft is not None


def test_without_a_budget_only_files_and_vocabularies_are_checked(pair):
    check = preflight(pair[0], pair[1], 2048, None)
    assert check.fit is None and check.reasons == []
    alone = preflight(pair[0], None, 2048, None)
    assert alone.compat is None and alone.draft is None and alone.refusal is None


def test_a_truncated_file_is_refused_before_anything_else(pair, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(pair[0].read_bytes()[:4096])
    check = preflight(broken, pair[1], 2048, Budget((GpuBudget("CUDA0", 2**40),)))
    assert [r.check for r in check.reasons] == [FILE]
    assert check.refusal is not None and "broken.gguf" in check.refusal and check.fit is None
    # without the file check the header reader meets the same file and says it cannot read it
    unread = preflight(broken, None, 2048, None, check_files=False)
    assert [r.check for r in unread.reasons] == [FILE] and unread.refusal.startswith("cannot read the model")


def test_incompatible_vocabularies_are_refused_with_llama_cpps_reasons(incompatible_pair):
    check = preflight(*incompatible_pair, 2048, None)
    assert [r.check for r in check.reasons] == [VOCAB]
    assert check.vocab_reasons and check.vocab_reasons == check.compat["reasons"]
    assert check.refusal.startswith("This draft cannot speculate for this target")


def test_too_big_is_the_fit_verdicts_explanation(pair):
    full = probe(FakeNVML([rtx4090(0, used=24 * 2**30 - 2**20)]))
    check = preflight(pair[0], pair[1], 2048, Budget.from_report(full))
    assert [r.check for r in check.reasons] == [MEMORY] and check.refusal is None
    # the same verdict check_fit gives for the same pair and report
    same = check_fit(inspect_gguf(pair[0]), 2048, draft=inspect_gguf(pair[1]), report=full)
    assert check.too_big == same.explanation(2048) and "does not fit on CUDA0" in check.too_big


def test_a_plan_that_cannot_be_made_is_a_reason_not_an_exception(pair):
    check = preflight(pair[0], None, 2048, Budget(), cache_type_k="no-such-type")
    assert [r.check for r in check.reasons] == [NO_PLAN] and check.fit is None
    assert check.refusal is None and check.too_big is None
