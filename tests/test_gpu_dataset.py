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


def test_batch_curves_start_at_one_and_cover_two_four_eight():
    for curve in _rows("batch_curves.json", "curves"):
        by_batch = {int(b): float(t) for b, t in curve["tokens_per_s_by_batch"].items()}
        assert {1, 2, 4, 8} <= set(by_batch) and all(t > 0 for t in by_batch.values()), curve


def test_speculative_runs_have_what_a_speedup_needs():
    for row in _rows("speculative_runs.json", "rows"):
        assert row["target"] and (row["draft"] or "mtp" in (row["caveats"] + row["tool"]).lower()), row
        assert row["speedup"] is not None or (row["plain_tokens_per_s"] and row["spec_tokens_per_s"]), row
        if row["acceptance"] is not None:
            assert 0 <= row["acceptance"] <= 1, row
