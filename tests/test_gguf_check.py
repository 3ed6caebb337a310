"""The pre-load GGUF check: precise errors for broken files, fuzzed with hypothesis."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.models.gguf_check import GGUFError, check_gguf


def test_good_files_pass(pair):
    for path in pair:
        check_gguf(path)


def test_missing_and_directory(tmp_path):
    with pytest.raises(GGUFError, match="not found"):
        check_gguf(tmp_path / "nope.gguf", "target")
    with pytest.raises(GGUFError, match="not a file"):
        check_gguf(tmp_path, "draft")


@pytest.mark.parametrize("fraction", [0.05, 0.5, 0.99])
def test_truncation_is_named(pair, tmp_path, fraction):
    data = pair[0].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(GGUFError, match="truncated|damaged"):
        check_gguf(cut)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=st.integers(min_value=4, max_value=4000), value=st.integers(min_value=0, max_value=255))
def test_corrupted_header_never_escapes_as_another_exception(pair, tmp_path, offset, value):
    data = bytearray(pair[1].read_bytes())
    data[offset] = value
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    try:
        check_gguf(bad)
    except GGUFError:
        pass


@settings(max_examples=40, deadline=None)
@given(st.binary(min_size=0, max_size=256))
def test_random_bytes(tmp_path_factory, blob):
    p = tmp_path_factory.mktemp("rnd") / "r.gguf"
    p.write_bytes(blob)
    with pytest.raises(GGUFError):
        check_gguf(p)
