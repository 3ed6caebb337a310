"""The pre-load GGUF check: precise errors for broken files, fuzzed with hypothesis."""

import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.models.demo_models import list_demo_models
from engine.models.gguf_check import GGUFError, check_gguf
from engine.models.gguf_inspect import inspect_gguf

# what check_gguf says is wrong, one of these, after "<role> file <name> "
PROBLEMS = re.compile(
    r"too short to be a GGUF model|is not a GGUF file|has GGUF version \d+|has an implausible header"
    r"|has a header that cannot be read .*the file is damaged or truncated|is truncated: its tensors need"
    r"|holds no tensors",
    re.S,
)


def assert_names_the_problem(exc: GGUFError, role: str, name: str) -> str:
    message = str(exc)
    assert message.startswith(f"{role} file {name} "), message
    assert PROBLEMS.search(message), message
    return message


@pytest.mark.parametrize("which", ["target", "draft", "demo"])
def test_good_files_pass_and_one_byte_less_does_not(pair, tmp_path, which):
    """Every file the project writes or ships passes; the same file cut one byte short of its last
    tensor's end (as inspect_gguf reads it) does not: the check reads as far as the data goes."""
    paths = {"target": [pair[0]], "draft": [pair[1]], "demo": [m.path for m in list_demo_models()]}[which]
    for path in paths:
        assert check_gguf(path, "target") is None
        end = max(t.offset + t.n_bytes for t in inspect_gguf(path).tensors)
        cut = tmp_path / path.name
        cut.write_bytes(path.read_bytes()[: end - 1])
        with pytest.raises(GGUFError) as err:
            check_gguf(cut, "target")
        assert "truncated" in assert_names_the_problem(err.value, "target", cut.name)


def test_a_cut_file_is_said_to_be_truncated_and_by_how_much(pair, tmp_path):
    end = max(t.offset + t.n_bytes for t in inspect_gguf(pair[0]).tensors)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(pair[0].read_bytes()[: end // 2])
    with pytest.raises(GGUFError) as err:
        check_gguf(cut, "target")
    message = assert_names_the_problem(err.value, "target", cut.name)
    assert f"is truncated: its tensors need {end} bytes but the file has {end // 2} (50.0% present)" in message


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
@given(
    offset=st.one_of(st.integers(min_value=4, max_value=23), st.integers(min_value=24, max_value=4000)),
    value=st.integers(min_value=0, max_value=255),
)
def test_corrupted_header_is_named_or_harmless(pair, tmp_path, offset, value):
    original = pair[1].read_bytes()
    data = bytearray(original)
    data[offset] = value
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    try:
        check_gguf(bad)
    except GGUFError as exc:
        message = assert_names_the_problem(exc, "model", "bad.gguf")
        assert data != original, f"the unchanged file was refused: {message}"
        if version not in (2, 3):  # the fixed header is read first, and its fault named exactly
            assert f"has GGUF version {version};" in message
        elif n_tensors > 1_000_000 or n_kv > 1_000_000:
            assert f"({n_tensors} tensors, {n_kv} keys)" in message
    else:
        assert version in (2, 3) and n_tensors <= 1_000_000 and n_kv <= 1_000_000


@settings(max_examples=40, deadline=None)
@given(st.binary(min_size=0, max_size=256))
def test_random_bytes(tmp_path_factory, blob):
    p = tmp_path_factory.mktemp("rnd") / "r.gguf"
    p.write_bytes(blob)
    with pytest.raises(GGUFError) as err:
        check_gguf(p)
    message = assert_names_the_problem(err.value, "model", "r.gguf")
    if len(blob) < 24:
        assert f"is {len(blob)} bytes, too short" in message
    elif blob[:4] != b"GGUF":
        assert f"it starts with {blob[:4]!r}" in message


@pytest.mark.slow
def test_a_truncated_model_is_the_input_s_fault_not_an_internal_error(pair, tmp_path, capsys):
    """issue 30 #8: the engine answered a cut file with kind "internal"; the command line printed
    "spectune: error (internal): GGUFError: ...". The message was right, the label was not."""
    from engine.cli.main import main
    from engine.core.settings import LoadSettings
    from engine.runtime.client import EngineClient, EngineError

    cut = tmp_path / "cut.gguf"
    cut.write_bytes(pair[0].read_bytes()[: pair[0].stat().st_size // 2])
    with EngineClient() as client:
        client.start()
        with pytest.raises(EngineError, match="truncated") as err:
            client.load(LoadSettings(cut, pair[1], ctx=256))
    assert err.value.kind == "invalid_model"
    assert main(["run", "--target", str(cut), "--draft", str(pair[1]), "--prompt", "hi", "--max-tokens", "4"]) == 2
    said = capsys.readouterr().err
    assert "truncated" in said and "internal" not in said and "GGUFError" not in said, said
