"""tests/data/gpu: published GPU measurements (issue 49). Every row names its source and its numbers are
plausible; a row that lost its source or gained a guessed value fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "gpu"


def _rows(name: str, key: str) -> list[dict]:
    return json.loads((DATA / name).read_text(encoding="utf-8"))[key]


@pytest.mark.parametrize(
    ("name", "key"), [("plain_decode.json", "rows"), ("batch_curves.json", "curves"), ("speculative_runs.json", "rows")]
)
def test_every_row_names_its_source_and_gpu(name, key):
    rows = _rows(name, key)
    assert rows
    for row in rows:
        assert str(row["source"]).startswith("https://"), row
        assert row["gpu"].strip(), row
        assert isinstance(row["caveats"], str)


def test_plain_decode_rows_are_tokens_per_second_of_tg_tests():
    for row in _rows("plain_decode.json", "rows"):
        assert row["test"].startswith("tg") and 0 < row["tokens_per_s"] < 5000, row


def test_batch_curves_start_at_one_and_cover_two_sizes_a_verify_runs():
    for curve in _rows("batch_curves.json", "curves"):
        by_batch = {int(b): float(t) for b, t in curve["tokens_per_s_by_batch"].items()}
        assert 1 in by_batch and len(set(by_batch) & set(range(2, 9))) >= 2, curve
        assert all(t > 0 for t in by_batch.values()), curve


def test_the_gpu_table_sources_every_figure_it_gives():
    table = json.loads((Path(__file__).parent.parent / "resources" / "catalog" / "gpus.json").read_text())["gpus"]
    assert len(table) >= 40
    gens = {g["generation"] for g in table}
    assert {"Pascal", "Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell"} <= gens
    for g in table:
        for field in ("vram_gb", "memory_bandwidth_gb_s", "fp16_tensor_tflops", "int8_tensor_tops"):
            if g.get(field) is not None:
                assert g["sources"].get(field), (g["name"], field)
        assert g["memory_bandwidth_gb_s"] and g["vram_gb"] and g["compute_capability"], g["name"]


def test_speculative_runs_have_what_a_speedup_needs():
    for row in _rows("speculative_runs.json", "rows"):
        assert row["target"] and (row["draft"] or "mtp" in (row["caveats"] + row["tool"]).lower()), row
        assert row["speedup"] is not None or (row["plain_tokens_per_s"] and row["spec_tokens_per_s"]), row
        if row["acceptance"] is not None:
            assert 0 <= row["acceptance"] <= 1, row


def test_a_lent_gpus_run_joins_the_dataset_as_rows_no_fit_reads(tmp_path):
    """bench/gpu_device_rows.py: a gpu_check JSON's plain rows become dataset rows, once; a run without a GPU adds
    nothing. (bench/gpu_prediction.py reads them apart from the published rows: load_cases(device_runs=True).)"""
    import sys

    sys.path.insert(0, str(Path(__file__).parent.parent))
    from bench.gpu_device_rows import add

    run = {
        "gpu": "NVIDIA H200",
        "results": "bench/results/gpu_check-2026-12-07-1200.txt",
        "models": {"8B f16": {"architecture": "llama", "quant": "F16", "size_gib": 14.96, "params_b": 8.03}},
        "rows": [
            {"model": "8B f16", "setting": "plain", "tokens_per_s": None, "server_tps": 212.0},
            {"model": "8B f16", "setting": "draft-simple K=4", "tokens_per_s": 300.0},
            {"model": "1B f16", "setting": "plain", "tokens_per_s": 900.0},  # no size: left out
        ],
        "failures": [],
    }
    path, data = tmp_path / "run.json", tmp_path / "device_runs.json"
    path.write_text(json.dumps(run))
    added = add(path, data)
    assert [(r["gpu"], r["quant"], r["tokens_per_s"]) for r in added] == [("NVIDIA H200", "F16", 212.0)]
    assert "never fitted" in added[0]["caveats"] and added[0]["source"].startswith("bench/results/")
    assert add(path, data) == [] and len(json.loads(data.read_text())["rows"]) == 1
    run["gpu"] = None
    path.write_text(json.dumps(run))
    with pytest.raises(ValueError, match="names no GPU"):
        add(path, data)


def test_a_row_from_a_build_before_2025_is_told_by_its_build_then_its_date_then_its_thread():
    """bench/gpu_prediction.py fits what an older llama.cpp paid beyond the shipped build on such rows (and only
    there): the rule that picks them."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent.parent))
    from bench.gpu_prediction import old_build

    assert old_build({"build": "4426e298 (2824)", "date": "2026-01-01", "source": "https://x"})
    assert not old_build({"build": "193ee38a1 (7653)", "date": "2024-01-01", "source": "https://x"})
    assert old_build({"build": "8cf6b42", "date": "2024-05-11", "source": "https://x"})
    assert not old_build({"build": None, "date": None, "source": "https://github.com/ggml-org/llama.cpp/pull/12183"})
    assert old_build({"build": None, "date": None, "source": "https://github.com/ggml-org/llama.cpp/pull/4766"})
    assert not old_build({"build": None, "date": None, "source": "https://github.com/smoothyy3/willitrun/blob/a/b"})
    rows = _rows("plain_decode.json", "rows")
    assert 30 <= sum(map(old_build, rows)) < len(rows) / 2  # the 2024 notebooks and pull requests, not the scoreboard
