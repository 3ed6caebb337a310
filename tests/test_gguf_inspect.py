"""engine.models.gguf_inspect on real files: llama.cpp's vocab GGUFs, synthetic models, and broken ones."""

from __future__ import annotations

import hashlib
import os
import re
import struct
import time
import tracemalloc
from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.models.gguf_inspect import GGUFInspectError, inspect_gguf
from engine.models.synthetic import ModelShape, PairSpec, build_vocab, write_pair

# -- helpers shared with the compat and memory-plan tests -----------------------------------


def vocab_dir() -> Path:
    from engine.llama.install import LlamaInstallError, source_tree

    try:
        return source_tree() / "models"
    except LlamaInstallError as exc:
        pytest.skip(f"the pinned llama.cpp sources are not available: {exc}")


def vocab_files() -> list[Path]:
    files = sorted(vocab_dir().glob("ggml-vocab-*.gguf"))
    if not files:
        pytest.skip("the pinned llama.cpp sources hold no models/ggml-vocab-*.gguf files")
    return files


def tokenizer_fields(path: Path) -> list[tuple[str, object, gguf.GGUFValueType, gguf.GGUFValueType | None]]:
    """Every tokenizer.* key of a GGUF, read with the gguf package, ready for GGUFWriter.add_key_value."""
    out = []
    for name, f in gguf.GGUFReader(str(path)).fields.items():
        if not name.startswith("tokenizer."):
            continue
        sub = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        out.append((name, f.contents(), f.types[0], sub))
    return out


def write_model(
    path: Path,
    *,
    arch: str = "llama",
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    head_dim: int | None = None,
    dtype: str = "f16",
    tokens: list[str] | None = None,
    tokenizer: list | None = None,
    extra_tokens: int = 0,
    tie: bool = False,
    kv: dict | None = None,
    extra_tensors: dict | None = None,
    endianess: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE,
    add_bos: bool | None = True,
    bos: int = 1,
    eos: int = 2,
) -> Path:
    """A llama-architecture GGUF with zero weights, written in well under a second.

    tokenizer: tokenizer fields copied from another GGUF (tokenizer_fields); else
    the synthetic SentencePiece vocabulary, optionally extended by extra_tokens.
    """
    hd = head_dim or n_embd // n_head
    w = gguf.GGUFWriter(str(path), arch, endianess=endianess)
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(1e-5)
    if head_dim:
        w.add_key_length(hd)
        w.add_value_length(hd)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32))
    if tokenizer is not None:
        for name, value, vtype, sub in tokenizer:
            w.add_key_value(name, value, vtype, sub)
        n_vocab = next(len(v) for n, v, _, _ in tokenizer if n == "tokenizer.ggml.tokens")
    else:
        vocab, scores, types = build_vocab()
        if tokens is not None:
            vocab, scores, types = list(tokens), [0.0] * len(tokens), [1] * len(tokens)
        for i in range(extra_tokens):
            vocab.append(f"<extra_{i}>")
            scores.append(-1000.0)
            types.append(int(gguf.TokenType.USER_DEFINED))
        w.add_tokenizer_model("llama")
        w.add_token_list(vocab)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(bos)
        w.add_eos_token_id(eos)
        if add_bos is not None:
            w.add_add_bos_token(add_bos)
        n_vocab = len(vocab)
    for key, value in (kv or {}).items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        else:
            w.add_string(key, value)
    dt = np.float16 if dtype == "f16" else np.float32

    def put(name: str, shape: tuple[int, ...]) -> None:
        # numpy shapes are ggml's reversed: (rows, row length)
        w.add_tensor(name, np.zeros(shape, dtype=np.float32 if len(shape) == 1 else dt))

    put("token_embd.weight", (n_vocab, n_embd))
    put("output_norm.weight", (n_embd,))
    if not tie:
        put("output.weight", (n_vocab, n_embd))
    q, kv_dim = n_head * hd, n_head_kv * hd
    for i in range(n_layer):
        put(f"blk.{i}.attn_norm.weight", (n_embd,))
        put(f"blk.{i}.attn_q.weight", (q, n_embd))
        put(f"blk.{i}.attn_k.weight", (kv_dim, n_embd))
        put(f"blk.{i}.attn_v.weight", (kv_dim, n_embd))
        put(f"blk.{i}.attn_output.weight", (n_embd, q))
        put(f"blk.{i}.ffn_norm.weight", (n_embd,))
        put(f"blk.{i}.ffn_gate.weight", (n_ff, n_embd))
        put(f"blk.{i}.ffn_up.weight", (n_ff, n_embd))
        put(f"blk.{i}.ffn_down.weight", (n_embd, n_ff))
    for name, shape in (extra_tensors or {}).items():
        put(name, shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# -- real files ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vocab_infos():
    return {p.name: inspect_gguf(p) for p in vocab_files()}


def test_every_vocab_file_is_read(vocab_infos):
    assert len(vocab_infos) == 19
    for name, info in vocab_infos.items():
        v = info.vocab
        assert v.load_error is None and v.vocab_type in {"SPM", "BPE", "WPM", "UGM"}, name
        assert v.n_tokens == len(v.tokens) > 30000 and len(v.fingerprint) == 16, name
        assert info.architecture and info.block_count, name


# the gguf package is slow on big vocabularies (it maps every token), so the cross-check uses the small files
@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "ggml-vocab-llama-spm.gguf",
        "ggml-vocab-phi-3.gguf",
        "ggml-vocab-bert-bge.gguf",
        "ggml-vocab-deepseek-coder.gguf",
    ],
)
def test_vocab_file_matches_the_gguf_package(vocab_infos, name):
    info = vocab_infos[name]
    reader = gguf.GGUFReader(str(vocab_dir() / name))
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    assert info.vocab.n_tokens == len(tokens)
    assert [t.decode() for t in info.vocab.tokens] == tokens
    assert info.vocab.fingerprint == hashlib.sha256("\x00".join(tokens).encode()).hexdigest()[:16]
    assert info.has_chat_template == ("tokenizer.chat_template" in reader.fields)
    assert info.tensors == [] and info.parameter_count == 0
    # every scalar key reads the same as the gguf package reads it
    for key, f in reader.fields.items():
        if f.types[0] == gguf.GGUFValueType.ARRAY or key.startswith("GGUF."):
            continue
        value = f.contents()
        if isinstance(value, float):
            assert info.metadata[key] == pytest.approx(value), key
        else:
            assert info.metadata[key] == value, key


@pytest.mark.parametrize(
    "name, vocab_type, n_tokens, bos, eos, add_bos, add_eos",
    [
        ("ggml-vocab-llama-spm.gguf", "SPM", 32000, 1, 2, True, False),
        ("ggml-vocab-bert-bge.gguf", "WPM", 30522, 101, -1, True, False),  # BERT defaults, no keys in the file
        ("ggml-vocab-nomic-bert-moe.gguf", "UGM", 250048, 0, 2, True, True),
        ("ggml-vocab-gemma-4.gguf", "BPE", 262144, 2, 1, True, False),  # Gemma 4: add_bos forced on
        ("ggml-vocab-llama-bpe.gguf", "BPE", 128256, 128000, 128001, True, False),  # llama-bpe pre: add_bos on
        ("ggml-vocab-qwen2.gguf", "BPE", 151936, 151643, 151643, False, False),
        ("ggml-vocab-falcon.gguf", "BPE", 65024, 11, 11, False, False),
    ],
)
def test_special_tokens_are_resolved_as_llama_cpp_does(
    vocab_infos, name, vocab_type, n_tokens, bos, eos, add_bos, add_eos
):
    v = vocab_infos[name].vocab
    assert (v.vocab_type, v.n_tokens, v.bos_id, v.eos_id, v.add_bos, v.add_eos) == (
        vocab_type,
        n_tokens,
        bos,
        eos,
        add_bos,
        add_eos,
    )
    assert v.load_error is None


def test_vocab_file_hparams(vocab_infos):
    info = vocab_infos["ggml-vocab-phi-3.gguf"]
    d = info.to_dict()
    assert (d["architecture"], d["block_count"], d["n_embd"], d["n_head"], d["n_head_kv"]) == ("phi3", 32, 3072, 32, 32)
    assert (d["head_dim_k"], d["n_ff"], d["n_ctx_train"], d["file_type_name"]) == (96, 8192, 4096, "MOSTLY_F16")
    assert d["has_chat_template"] is True and d["speculative_role"] is None


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    shape = ModelShape(n_embd=128, n_layer=3, n_head=4, n_head_kv=2, n_ff=256)
    return write_pair(tmp_path_factory.mktemp("inspect_pair"), PairSpec(shape=shape, dtype="f16"))


def test_synthetic_model_shape_and_tensor_index(synthetic):
    target, _ = synthetic
    info = inspect_gguf(target)
    reader = gguf.GGUFReader(str(target))
    assert (info.architecture, info.block_count, info.n_embd, info.n_head, info.n_head_kv) == ("llama", 3, 128, 4, 2)
    assert (info.head_dim_k, info.head_dim_v, info.n_ff, info.n_ctx_train) == (32, 32, 256, 4096)
    assert info.parameter_count == sum(int(t.n_elements) for t in reader.tensors)
    n_vocab = len(build_vocab()[0])
    per_layer = 128 * 2 + 128 * 128 * 2 + 64 * 128 * 2 + 256 * 128 * 3
    assert info.parameter_count == 2 * n_vocab * 128 + 128 + 3 * per_layer
    by_name = {t.name: t for t in reader.tensors}
    for t in info.tensors:
        ref = by_name[t.name]
        assert t.offset == int(ref.data_offset) and t.n_bytes == int(ref.n_bytes)
        assert t.shape == tuple(int(x) for x in ref.shape) and t.type_id == int(ref.tensor_type)
    mix = info.quantization_mix
    assert set(mix) == {"F16", "F32"} and mix["F32"]["tensors"] == 1 + 2 * 3  # the norms stay f32
    assert sum(m["bytes"] for m in mix.values()) == info.tensor_bytes == sum(int(t.n_bytes) for t in reader.tensors)
    assert info.file_type == 1 and info.to_dict()["file_type_name"] == "MOSTLY_F16"
    assert info.vocab.vocab_type == "SPM" and info.vocab.add_bos and info.speculative_role is None


def test_quantized_tensor_sizes(tmp_path):
    target, _ = write_pair(tmp_path, PairSpec(dtype="q8_0"))
    info = inspect_gguf(target)
    q8 = [t for t in info.tensors if t.type_name == "Q8_0"]
    assert q8 and all(t.n_bytes == t.n_elements // 32 * 34 for t in q8)
    assert info.quantization_mix["Q8_0"]["bytes"] == sum(t.n_bytes for t in q8)
    assert info.to_dict()["file_type_name"] == "MOSTLY_Q8_0"


def test_big_endian_file_reads_like_little_endian(tmp_path):
    little = inspect_gguf(write_model(tmp_path / "le.gguf"))
    big = inspect_gguf(write_model(tmp_path / "be.gguf", endianess=gguf.GGUFEndian.BIG))
    assert big.to_dict() | {"path": ""} == little.to_dict() | {"path": ""}


# -- speculative roles (names from src/llama-arch.cpp) --------------------------------------------


def test_mtp_layers_from_the_key_and_from_tensors(tmp_path):
    keyed = inspect_gguf(write_model(tmp_path / "keyed.gguf", kv={"llama.nextn_predict_layers": 1}))
    assert keyed.nextn_layers == 1 and keyed.speculative_role == "mtp"
    tensors = {"blk.1.nextn.eh_proj.weight": (64, 128), "blk.1.nextn.enorm.weight": (64,)}
    by_tensor = inspect_gguf(write_model(tmp_path / "tensors.gguf", extra_tensors=tensors))
    assert by_tensor.nextn_layers == 1 and by_tensor.speculative_role == "mtp"
    plain = inspect_gguf(write_model(tmp_path / "plain.gguf", kv={"llama.nextn_predict_layers": 0}))
    assert plain.nextn_layers == 0 and plain.speculative_role is None


def test_eagle3_dflash_and_dspark_drafts(tmp_path):
    eagle = write_model(
        tmp_path / "eagle3.gguf", arch="eagle3", n_layer=1, extra_tensors={"fc.weight": (64, 192), "d2t": (580,)}
    )
    assert inspect_gguf(eagle).speculative_role == "eagle3"
    # an EAGLE-3 head is recognised by its fc / d2t tensors even under another architecture name
    renamed = write_model(
        tmp_path / "eagle3_llama.gguf", n_layer=1, extra_tensors={"fc.weight": (64, 192), "d2t": (580,)}
    )
    assert inspect_gguf(renamed).speculative_role == "eagle3"
    assert inspect_gguf(write_model(tmp_path / "dflash.gguf", arch="dflash")).speculative_role == "dflash"
    dspark = write_model(tmp_path / "dspark.gguf", arch="dflash", extra_tensors={"markov_w1.weight": (64, 580)})
    assert inspect_gguf(dspark).speculative_role == "dspark"


# -- broken files: one error type, a precise message -------------------------------------------------


def header(version: int = 3, n_tensors: int = 0, n_kv: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def gguf_string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def check_error(tmp_path: Path, data: bytes, *fragments: str) -> str:
    path = tmp_path / "broken.gguf"
    path.write_bytes(data)
    with pytest.raises(GGUFInspectError) as err:
        inspect_gguf(path)
    message = str(err.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(GGUFInspectError, match="no such file"):
        inspect_gguf(tmp_path / "absent.gguf")
    with pytest.raises(GGUFInspectError, match="directory"):
        inspect_gguf(tmp_path)


def test_wrong_magic_and_versions(tmp_path):
    check_error(tmp_path, b"GGML" + bytes(20), "not a GGUF file", "b'GGML'", "offset 0")
    check_error(tmp_path, b"", "truncated", "GGUF magic", "offset 0")
    check_error(tmp_path, header(version=1), "version 1 is not supported", "offset 4")
    check_error(tmp_path, header(version=4), "unsupported GGUF version 4", "offset 4")
    check_error(tmp_path, header()[:10], "truncated", "the tensor count", "offset 8", "2 remain")


def test_lengths_beyond_the_file_are_refused_before_allocating(tmp_path):
    key = gguf_string(b"general.name") + struct.pack("<I", 8)
    big_string = header(n_kv=1) + key + struct.pack("<Q", 1 << 60) + b"abc"
    message = check_error(tmp_path, big_string, "claims 1152921504606846976 bytes", "offset 48")
    assert "general.name" in message
    array = gguf_string(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 1 << 40)
    check_error(tmp_path, header(n_kv=1) + array, "claims 1099511627776 strings", "offset 57")
    numbers = gguf_string(b"x.layers") + struct.pack("<IIQ", 9, 5, 1 << 50)
    check_error(tmp_path, header(n_kv=1) + numbers, "1125899906842624 int32 elements")
    check_error(tmp_path, header(n_kv=1 << 40), "claims 1099511627776 metadata keys", "offset 16")
    check_error(tmp_path, header(n_tensors=1 << 40), "claims 1099511627776 tensors", "offset 8")


def test_malformed_values(tmp_path):
    bad_type = header(n_kv=1) + gguf_string(b"k") + struct.pack("<I", 13) + bytes(8)
    check_error(tmp_path, bad_type, "unknown value type 13", "'k'", "offset 33")
    nested = header(n_kv=1) + gguf_string(b"k") + struct.pack("<IIQ", 9, 9, 1) + bytes(16)
    check_error(tmp_path, nested, "holds arrays", "offset 37")
    twice = header(n_kv=2) + (gguf_string(b"k") + struct.pack("<IB", 0, 7)) * 2
    check_error(tmp_path, twice, "'k' appears twice", "offset 38")
    alignment = header(n_kv=1) + gguf_string(b"general.alignment") + struct.pack("<II", 4, 24)
    check_error(tmp_path, alignment, "general.alignment is 24", "power of two")


def tensor_entry(name: bytes, dims: list[int], ggml_type: int, offset: int) -> bytes:
    return (
        gguf_string(name)
        + struct.pack("<I", len(dims))
        + struct.pack(f"<{len(dims)}Q", *dims)
        + struct.pack("<IQ", ggml_type, offset)
    )


def test_malformed_tensor_index(tmp_path):
    check_error(
        tmp_path,
        header(n_tensors=1) + tensor_entry(b"w", [32], 99, 0) + bytes(64),
        "tensor 'w' has unknown ggml type 99",
    )
    check_error(tmp_path, header(n_tensors=1) + tensor_entry(b"w", [1, 1, 1, 1, 1], 0, 0) + bytes(64), "5 dimensions")
    check_error(
        tmp_path, header(n_tensors=1) + tensor_entry(b"w", [33], 8, 0) + bytes(64), "33 elements", "Q8_0 block size 32"
    )
    check_error(
        tmp_path,
        header(n_tensors=1) + tensor_entry(b"w", [8], 0, 4) + bytes(64),
        "offset 4, not a multiple of the alignment 32",
    )
    two = tensor_entry(b"w", [8], 0, 0) * 2
    check_error(tmp_path, header(n_tensors=2) + two + bytes(64), "tensor 'w' appears twice")


def test_truncated_tensor_data_names_the_tensor(tmp_path):
    path = write_model(tmp_path / "m.gguf")
    info = inspect_gguf(path)
    last = max(info.tensors, key=lambda t: t.offset)
    data = path.read_bytes()
    message = check_error(
        tmp_path, data[: last.offset + 10], "truncated", repr(last.name), f"ends at {last.offset + 10}"
    )
    assert str(last.offset + last.n_bytes) in message


def test_a_40_gb_file_is_inspected_without_reading_its_data(tmp_path):
    # one f16 tensor of 20 G elements behind a real header; the data is a sparse hole
    rows, cols = 163840, 131072
    entry = tensor_entry(b"token_embd.weight", [cols, rows], 1, 0)
    kv = gguf_string(b"general.architecture") + struct.pack("<I", 8) + gguf_string(b"llama")
    head = header(n_tensors=1, n_kv=1) + kv + entry
    data_offset = len(head) + (-len(head)) % 32
    path = tmp_path / "huge.gguf"
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(data_offset + rows * cols * 2)
    assert path.stat().st_size > 40e9
    read_before = bytes_read_by_this_process()
    info = inspect_gguf(path)
    # the header, and no more than the parser's read-ahead (1 MiB) beyond it: the data is never read
    assert bytes_read_by_this_process() - read_before < 4 << 20
    assert info.parameter_count == rows * cols and info.tensor_bytes == rows * cols * 2


def bytes_read_by_this_process() -> int:
    """Bytes this process has read through read() and its kin (Linux's /proc/self/io, rchar)."""
    io = Path("/proc/self/io")
    if not io.exists():
        pytest.skip("counting the bytes read needs Linux's /proc/self/io")
    return int(re.search(r"^rchar: (\d+)$", io.read_text(), re.M)[1])


# -- fuzzing -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    tokens = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(12)]
    write_model(
        path,
        n_embd=16,
        n_layer=1,
        n_head=2,
        n_head_kv=1,
        n_ff=16,
        tokens=tokens,
        dtype="f32",
        kv={"general.name": "tiny"},
    )
    return path.read_bytes()


def parse_bytes(tmp_path: Path, data: bytes, name: str = "fuzz.gguf"):
    path = tmp_path / name
    path.write_bytes(data)
    return inspect_gguf(path)


@pytest.mark.slow
def test_truncation_at_every_byte_of_a_small_file(tmp_path, tiny_gguf):
    full = parse_bytes(tmp_path, tiny_gguf)
    assert full.parameter_count > 0
    for cut in range(len(tiny_gguf)):
        with pytest.raises(GGUFInspectError, match=r"truncated|claims"):
            parse_bytes(tmp_path, tiny_gguf[:cut])


FUZZ = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])

# every problem the inspector names (engine/models/gguf_inspect.py), then where it is
PROBLEMS = re.compile(
    r"truncated: |claims \d+ |unknown (value|element|ggml) type \d+|holds arrays|not a GGUF file: it starts with"
    r"|GGUF version \d+|appears twice|must be a power of two|dimensions; ggml allows at most"
    r"|impossible shape|has rows of \d+ elements|not a multiple of the alignment"
)


def named_problem(exc: GGUFInspectError, data: bytes, name: str = "fuzz.gguf") -> tuple[str, int]:
    """(what, offset) of an inspector error, which must name the file, a known problem and a byte offset
    inside the file."""
    m = re.fullmatch(re.escape(name) + r": (?P<what>.+) \(at byte offset (?P<at>\d+)\)", str(exc), re.S)
    assert m, f"not '<file>: <problem> (at byte offset N)': {exc}"
    assert PROBLEMS.search(m["what"]), f"no problem named: {exc}"
    assert int(m["at"]) <= len(data), f"an offset past the {len(data)}-byte file: {exc}"
    return m["what"], int(m["at"])


@FUZZ
@given(data=st.binary(max_size=512), prefix=st.booleans())
def test_random_bytes_raise_only_the_inspect_error(tmp_path, data, prefix):
    n_kv = data[0] if data else 0
    if prefix:  # past the magic check, into the header parser
        data = header(n_kv=n_kv) + data
    try:
        info = parse_bytes(tmp_path, data)
    except GGUFInspectError as exc:
        what, at = named_problem(exc, data)
        if not prefix and len(data) < 4:
            assert what.startswith("truncated: the GGUF magic") and at == 0
        elif not prefix and data[:4] != b"GGUF":
            assert what.startswith(f"not a GGUF file: it starts with {data[:4]!r}") and at == 0
        elif prefix:
            assert at >= 16, "the valid magic, version and tensor count are never blamed"
    else:
        assert prefix or data[:4] == b"GGUF"
        assert info.file_size == len(data) and not info.tensors  # the header claims none
        assert not prefix or len(info.metadata) == n_kv


@pytest.fixture(scope="module")
def tiny_info(tmp_path_factory, tiny_gguf):
    return parse_bytes(tmp_path_factory.mktemp("tiny_info"), tiny_gguf)


@FUZZ
@given(
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=1, max_value=255)), min_size=1, max_size=8)
)
def test_flipped_bytes_raise_only_the_inspect_error(tmp_path, tiny_gguf, tiny_info, flips):
    data = bytearray(tiny_gguf)
    for position, mask in flips:
        data[position % len(data)] ^= mask
    changed = [i for i in range(len(data)) if data[i] != tiny_gguf[i]]
    try:
        info = parse_bytes(tmp_path, bytes(data))
    except GGUFInspectError as exc:
        named_problem(exc, bytes(data))
        # the tensor data is not parsed: only a change in the header or the tensor index is a problem
        assert changed and changed[0] < tiny_info.data_offset, f"changed bytes {changed} of a valid header: {exc}"
    else:
        assert all(t.offset + t.n_bytes <= info.file_size for t in info.tensors)
        if not changed or changed[0] >= tiny_info.data_offset:  # only tensor data changed: the same model
            assert (info.metadata, info.tensors, info.vocab) == (tiny_info.metadata, tiny_info.tensors, tiny_info.vocab)


@settings(max_examples=25, deadline=5000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fraction=st.floats(min_value=0.0, max_value=0.999))
def test_truncated_real_vocab_file(tmp_path, fraction):
    data = (vocab_dir() / "ggml-vocab-llama-spm.gguf").read_bytes()
    with pytest.raises(GGUFInspectError, match="truncated|claims"):
        parse_bytes(tmp_path, data[: int(len(data) * fraction)])


def test_hostile_lengths_do_not_allocate(tmp_path):
    # a header that claims a 1 EiB string and a 2^40-element array must fail within a small memory budget
    hostile = [
        header(n_kv=1) + gguf_string(b"k") + struct.pack("<IQ", 8, 1 << 60) + bytes(4096),
        header(n_kv=1) + gguf_string(b"k") + struct.pack("<IIQ", 9, 8, 1 << 40) + bytes(4096),
        header(n_kv=1) + gguf_string(b"k") + struct.pack("<IIQ", 9, 12, 1 << 40) + bytes(4096),
        header(n_tensors=3) + tensor_entry(b"w", [1 << 62, 1 << 62], 0, 0) + bytes(4096),
    ]
    for data in hostile:
        path = tmp_path / "hostile.gguf"
        path.write_bytes(data)
        tracemalloc.start()
        try:
            with pytest.raises(GGUFInspectError):
                inspect_gguf(path)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 4 << 20, f"{peak} bytes allocated for a {len(data)}-byte file"


def test_a_header_read_once_is_kept_until_the_file_changes(tmp_path):
    """The GUI asks for a pair's headers several times per change; the second read costs nothing, each
    caller gets its own metadata, and a file rewritten (another size) is read again."""
    from engine.models.gguf_inspect import header_cached

    def written_a_minute_ago(path: Path, n_layer: int, name: str = "m") -> None:
        write_model(
            path,
            n_embd=16,
            n_layer=n_layer,
            n_head=2,
            n_head_kv=1,
            n_ff=16,
            tokens=TOKENS,
            dtype="f32",
            kv={"general.name": name},
        )
        os.utime(path, (time.time() - 60, time.time() - 60))  # a file just written is not kept (gguf_inspect)

    path = tmp_path / "m.gguf"
    write_model(path, n_embd=16, n_layer=2, n_head=2, n_head_kv=1, n_ff=16, tokens=TOKENS, dtype="f32")
    inspect_gguf(path)
    assert not header_cached(path)  # written just now: it may still be being written
    written_a_minute_ago(path, 2)
    first = inspect_gguf(path)
    assert header_cached(path)
    first.metadata["llama.block_count"] = 99  # a plan may set a key on its copy
    second = inspect_gguf(path)
    assert second.metadata["llama.block_count"] == 2 and second.vocab is first.vocab
    written_a_minute_ago(path, 3, name="a longer name")
    assert not header_cached(path) and inspect_gguf(path).metadata["llama.block_count"] == 3
    other = tmp_path / "scanned.gguf"
    written_a_minute_ago(other, 1)
    inspect_gguf(other, keep=False)  # a library scan leaves the cache as it was
    assert not header_cached(other)


TOKENS = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(12)]


def test_callers_asking_for_one_header_at_once_share_one_parse(tmp_path, monkeypatch):
    """The Lab's check, the Models page and the method list ask for a new pair's headers at the same moment,
    each from a thread: the file is parsed once and the others wait for that answer (issue 30 #7)."""
    import threading

    from engine.models import gguf_inspect

    path = tmp_path / "m.gguf"
    tokens = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(20000)]
    write_model(path, n_embd=16, n_layer=2, n_head=2, n_head_kv=1, n_ff=16, tokens=tokens, dtype="f32")
    os.utime(path, (time.time() - 60, time.time() - 60))  # settled, so kept
    parses: list[str] = []
    real_read = gguf_inspect._read

    def counted(p: Path):
        parses.append(threading.current_thread().name)
        return real_read(p)

    monkeypatch.setattr(gguf_inspect, "_read", counted)
    start = threading.Barrier(4)
    answers: list = []

    def ask() -> None:
        start.wait()
        answers.append(inspect_gguf(path))

    threads = [threading.Thread(target=ask, name=f"asker-{i}") for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(answers) == 4 and len(parses) == 1, parses
    assert all(a.vocab is answers[0].vocab and a.vocab.n_tokens == len(tokens) for a in answers)
