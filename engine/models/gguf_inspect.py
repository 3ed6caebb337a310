"""What a GGUF file holds, read from its header and tensor index only.

The parser streams the header through a buffered file and never touches the
tensor data, so a 40 GB model is inspected in the time it takes to read its
vocabulary. Every length in the file (strings, arrays, counts) is checked
against the bytes that remain before anything is allocated, so a damaged or
hostile file ends in one GGUFInspectError that names what is wrong and at which
byte offset, never in a hang or an unbounded allocation.

Special tokens and add-BOS/EOS flags are reported the way llama.cpp resolves
them at load (src/llama-vocab.cpp, llama_vocab::impl::load): defaults per
tokenizer model and pre-tokenizer first, then the file's keys. The draft/target
rule in engine.models.compat depends on exactly these values.
"""

from __future__ import annotations

import hashlib
import re
import struct
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

from engine.core.units import format_plan_bytes

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
KEEP_NUMERIC_ARRAY_MAX = 4096  # per-layer arrays are kept; bigger numeric arrays are only summarised
TOKEN_NULL = -1  # LLAMA_TOKEN_NULL

# GGUF value types (gguf.GGUFValueType) -> struct code and size
_SCALARS = {
    0: ("B", 1),
    1: ("b", 1),
    2: ("H", 2),
    3: ("h", 2),
    4: ("I", 4),
    5: ("i", 4),
    6: ("f", 4),
    7: ("?", 1),
    10: ("Q", 8),
    11: ("q", 8),
    12: ("d", 8),
}
_STRING, _ARRAY = 8, 9
_VALUE_TYPE_NAMES = {
    0: "uint8",
    1: "int8",
    2: "uint16",
    3: "int16",
    4: "uint32",
    5: "int32",
    6: "float32",
    7: "bool",
    8: "string",
    9: "array",
    10: "uint64",
    11: "int64",
    12: "float64",
}

# ggml types the pinned llama.cpp knows but gguf 0.19 does not (ggml/src/ggml-common.h: block_q2_0)
_EXTRA_TYPES = {42: ("Q2_0", 64, 18)}
_EXTRA_FILE_TYPES = {41: "MOSTLY_Q2_0"}


class GGUFInspectError(ValueError):
    """The file is not a GGUF this inspector can read; the message says what and where."""


def ggml_type_table() -> dict[int, tuple[str, int, int]]:
    """ggml type id -> (name, block size in elements, bytes per block)."""
    import gguf

    table = {int(t): (t.name, block, size) for t, (block, size) in gguf.GGML_QUANT_SIZES.items()}
    for type_id, entry in _EXTRA_TYPES.items():
        table.setdefault(type_id, entry)
    return table


GGML_TYPES = ggml_type_table()
GGML_TYPE_IDS = {name: type_id for type_id, (name, _, _) in GGML_TYPES.items()}


def ggml_row_bytes(type_name: str, n_elements: int) -> int:
    """Bytes of n_elements of a ggml type (ggml_row_size): whole blocks only."""
    name, block, size = GGML_TYPES[GGML_TYPE_IDS[type_name.upper()]]
    if n_elements % block:
        raise ValueError(f"{n_elements} elements are not a whole number of {name} blocks of {block}")
    return n_elements // block * size


def file_type_name(file_type: int | None) -> str | None:
    if file_type is None:
        return None
    import gguf

    try:
        return gguf.LlamaFileType(file_type).name
    except ValueError:
        return _EXTRA_FILE_TYPES.get(file_type, f"unknown ({file_type})")


@dataclass(frozen=True)
class ArraySummary:
    """An array kept only as its element type and length (token scores, merges, ...)."""

    item_type: str
    length: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order: ne[0] (row length) first
    type_name: str
    type_id: int
    offset: int  # absolute byte offset of the data in the file
    n_elements: int
    n_bytes: int


@dataclass(frozen=True)
class VocabInfo:
    """The vocabulary as llama.cpp will read it."""

    tokenizer_model: str | None  # tokenizer.ggml.model
    tokenizer_pre: str | None  # tokenizer.ggml.pre
    vocab_type: str  # llama.cpp's llama_vocab_type: NONE, SPM, BPE, WPM, UGM, RWKV, PLAMO2, TEST
    n_tokens: int
    bos_id: int  # -1 = none (LLAMA_TOKEN_NULL)
    eos_id: int
    add_bos: bool
    add_eos: bool
    fingerprint: str | None  # sha256 of the token texts joined with NUL, first 16 hex digits
    load_error: str | None  # why llama.cpp would refuse this vocabulary, if it would
    tokens: tuple[bytes, ...] = field(default=(), repr=False)

    def token_text(self, token_id: int) -> bytes:
        """llama_vocab_get_text: an empty token reads as "[EMPTY_<id>]" after llama.cpp's load."""
        text = self.tokens[token_id] if token_id < len(self.tokens) else b""
        return text or f"[EMPTY_{token_id}]".encode()


class _ArchInt:
    """A hyperparameter of ModelInfo read from its <architecture>.<key> metadata (None where the file does not
    say; a per-layer array gives its largest entry)."""

    def __init__(self, key: str):
        self.key = key

    def __get__(self, info: ModelInfo, owner: type | None = None) -> int | None:
        return info._arch_int(self.key)


@dataclass
class ModelInfo:
    path: str
    file_size: int
    version: int
    alignment: int
    data_offset: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    vocab: VocabInfo

    # -- hyperparameters (None where the file does not say) ------------------
    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None

    def arch_value(self, suffix: str) -> Any:
        return self.metadata.get(f"{self.architecture}.{suffix}") if self.architecture else None

    def _arch_int(self, suffix: str) -> int | None:
        value = self.arch_value(suffix)
        if isinstance(value, list):  # per-layer arrays: the largest entry
            value = max((v for v in value if isinstance(v, (int, float))), default=None)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def _head_dim(self, suffix: str) -> int | None:
        """The key or value head size: the file's key, else n_embd / n_head, as llama.cpp defaults it."""
        n = self._arch_int(suffix)
        if n is not None:
            return n
        return self.n_embd // self.n_head if self.n_embd and self.n_head else None

    block_count = _ArchInt("block_count")
    n_embd = _ArchInt("embedding_length")
    n_head = _ArchInt("attention.head_count")
    n_ff = _ArchInt("feed_forward_length")
    n_ctx_train = _ArchInt("context_length")

    @property
    def n_head_kv(self) -> int | None:
        # llama.cpp: head_count_kv defaults to head_count
        kv = self._arch_int("attention.head_count_kv")
        return kv if kv is not None else self.n_head

    @property
    def head_dim_k(self) -> int | None:
        return self._head_dim("attention.key_length")

    @property
    def head_dim_v(self) -> int | None:
        return self._head_dim("attention.value_length")

    @property
    def file_type(self) -> int | None:
        value = self.metadata.get("general.file_type")
        return int(value) if isinstance(value, int) else None

    @property
    def parameter_count(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @property
    def tensor_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    @property
    def quantization_mix(self) -> dict[str, dict[str, int]]:
        mix: dict[str, dict[str, int]] = {}
        for t in self.tensors:
            entry = mix.setdefault(t.type_name, {"tensors": 0, "parameters": 0, "bytes": 0})
            entry["tensors"] += 1
            entry["parameters"] += t.n_elements
            entry["bytes"] += t.n_bytes
        return dict(sorted(mix.items(), key=lambda kv: -kv[1]["bytes"]))

    @property
    def has_chat_template(self) -> bool:
        return any(k == "tokenizer.chat_template" or k.startswith("tokenizer.chat_template.") for k in self.metadata)

    @property
    def nextn_layers(self) -> int:
        """MTP (next-n prediction) layers: the <arch>.nextn_predict_layers key, else blocks with nextn tensors."""
        declared = self._arch_int("nextn_predict_layers") or 0
        blocks = {m.group(1) for t in self.tensors if (m := _NEXTN_TENSOR.match(t.name))}
        return max(declared, len(blocks))

    @property
    def speculative_role(self) -> str | None:
        """'eagle3', 'dspark' or 'dflash' for a draft head; 'gemma4-assistant' for Gemma 4's separate draft
        file; 'mtp' for a model with next-n layers; else None.

        Names from the pinned llama.cpp: src/llama-arch.cpp (LLM_ARCH_EAGLE3 "eagle3",
        LLM_ARCH_DFLASH "dflash", LLM_ARCH_GEMMA4_ASSISTANT "gemma4-assistant", tensors "fc" / "d2t"
        for EAGLE-3, "markov_w1" / "markov_w2" / "conf_proj" for the DSpark variant of DFlash,
        "blk.%d.nextn.*" for MTP) and common/speculative.cpp (draft-eagle3, draft-dflash, draft-dspark,
        and draft-mtp, which a gemma4-assistant file drafts with although its layers are all next-n ones).
        """
        arch = self.architecture
        if arch == "gemma4-assistant":
            return "gemma4-assistant"
        names = {t.name.rsplit(".", 1)[0] if t.name.endswith((".weight", ".bias")) else t.name for t in self.tensors}
        if arch == "eagle3" or {"fc", "d2t"} <= names:
            return "eagle3"
        if arch == "dflash":
            return "dspark" if names & {"markov_w1", "markov_w2", "conf_proj"} else "dflash"
        if self.nextn_layers > 0:
            return "mtp"
        return None

    def to_dict(self) -> dict[str, Any]:
        v = self.vocab
        return {
            "path": self.path,
            "file_size": self.file_size,
            "gguf_version": self.version,
            "architecture": self.architecture,
            "name": self.metadata.get("general.name"),
            "parameter_count": self.parameter_count,
            "tensor_count": len(self.tensors),
            "tensor_bytes": self.tensor_bytes,
            "block_count": self.block_count,
            "n_embd": self.n_embd,
            "n_head": self.n_head,
            "n_head_kv": self.n_head_kv,
            "head_dim_k": self.head_dim_k,
            "head_dim_v": self.head_dim_v,
            "n_ff": self.n_ff,
            "n_ctx_train": self.n_ctx_train,
            "file_type": self.file_type,
            "file_type_name": file_type_name(self.file_type),
            "quantization_mix": self.quantization_mix,
            "vocab": {
                "tokenizer_model": v.tokenizer_model,
                "tokenizer_pre": v.tokenizer_pre,
                "vocab_type": v.vocab_type,
                "n_tokens": v.n_tokens,
                "bos_id": v.bos_id,
                "eos_id": v.eos_id,
                "add_bos": v.add_bos,
                "add_eos": v.add_eos,
                "fingerprint": v.fingerprint,
                "load_error": v.load_error,
            },
            "has_chat_template": self.has_chat_template,
            "nextn_layers": self.nextn_layers,
            "speculative_role": self.speculative_role,
        }


_NEXTN_TENSOR = re.compile(r"^blk\.(\d+)\.nextn\.")


# -- the streaming parser -------------------------------------------------------


class _Stream:
    """Reads a GGUF header front to back, knowing its offset and what is left.

    It keeps its own read-ahead buffer so the hundreds of thousands of short
    strings of a vocabulary cost one slice each, not one system call each.
    """

    CHUNK = 1 << 20

    def __init__(self, fh: BinaryIO, size: int, name: str):
        self.fh, self.size, self.name = fh, size, name
        self.pos = 0  # absolute offset of the next unread byte
        self.buf, self.bpos = b"", 0  # read-ahead: buf[bpos:] starts at pos
        self.endian = "<"

    @property
    def remaining(self) -> int:
        return self.size - self.pos

    def fail(self, what: str, at: int | None = None) -> GGUFInspectError:
        return GGUFInspectError(f"{self.name}: {what} (at byte offset {self.pos if at is None else at})")

    def _need(self, n: int, what: str) -> None:
        if n > self.remaining:
            raise self.fail(
                f"truncated: {what} needs {n} bytes but only {self.remaining} remain in the {self.size}-byte file"
            )

    def _fill(self, n: int, what: str) -> None:
        """Make at least n bytes available in the buffer."""
        rest = self.buf[self.bpos :]
        more = self.fh.read(max(n - len(rest), self.CHUNK))
        self.buf, self.bpos = rest + more, 0
        if len(self.buf) < n:  # the file shrank while we read it
            raise self.fail(f"truncated: {what} could not be read ({len(self.buf)} of {n} bytes)")

    def read(self, n: int, what: str) -> bytes:
        self._need(n, what)
        if len(self.buf) - self.bpos < n:
            self._fill(n, what)
        data = self.buf[self.bpos : self.bpos + n]
        self.bpos += n
        self.pos += n
        return data

    def skip(self, n: int, what: str) -> None:
        self._need(n, what)
        if len(self.buf) - self.bpos >= n:
            self.bpos += n
        else:
            self.fh.seek(self.pos + n)
            self.buf, self.bpos = b"", 0
        self.pos += n

    def unpack(self, code: str, what: str) -> Any:
        return struct.unpack(self.endian + code, self.read(struct.calcsize(code), what))[0]

    def string(self, what: str) -> bytes:
        start = self.pos
        n = self.unpack("Q", f"the length of {what}")
        if n > self.remaining:
            raise self.fail(f"{what} claims {n} bytes but only {self.remaining} remain in the file", start)
        return self.read(n, what)

    def strings(self, count: int, what: str, keep: bool) -> list[bytes] | None:
        """count length-prefixed strings; the hot loop of a vocabulary (two arrays of 150k strings in a real
        model, parsed while the GUI waits on the GIL), kept tight: the strings that lie wholly in the buffer
        are walked with locals only, and the one that crosses its end takes the checked path."""
        out: list[bytes] | None = [] if keep else None
        unpack = struct.Struct(self.endian + "Q").unpack_from
        i = 0
        while i < count:
            buf, b = self.buf, self.bpos
            limit = len(buf) - 8
            # within the buffer a length cannot overrun the file: the buffer holds only bytes of the file
            while i < count and b <= limit:
                (n,) = unpack(buf, b)
                end = b + 8 + n
                if end > limit + 8:
                    break
                if out is not None:
                    out.append(buf[b + 8 : end])
                b = end
                i += 1
            self.pos += b - self.bpos
            self.bpos = b
            if i < count:
                self._one_string(i, what, out)
                i += 1
        return out

    def _one_string(self, i: int, what: str, out: list[bytes] | None) -> None:
        """String i, which crosses the read-ahead buffer's end: its length and bytes checked against the file."""
        if len(self.buf) - self.bpos < 8:
            self._need(8, f"the length of string {i} of {what}")
            self._fill(8, what)
        (n,) = struct.unpack_from(self.endian + "Q", self.buf, self.bpos)
        if n > self.remaining - 8:
            raise self.fail(f"string {i} of {what} claims {n} bytes but only {self.remaining - 8} remain in the file")
        self.bpos += 8
        self.pos += 8
        if out is not None:
            out.append(self.read(n, f"string {i} of {what}"))
        else:
            self.skip(n, f"string {i} of {what}")


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _read_value(s: _Stream, value_type: int, key: str) -> Any:
    if value_type in _SCALARS:
        code, _ = _SCALARS[value_type]
        value = s.unpack(code, f"the value of {key!r}")
        return bool(value) if value_type == 7 else value
    if value_type == _STRING:
        return _decode(s.string(f"the string value of {key!r}"))
    if value_type == _ARRAY:
        return _read_array(s, key)
    raise s.fail(f"key {key!r} has unknown value type {value_type}", s.pos - 4)


def _read_array(s: _Stream, key: str) -> Any:
    start = s.pos
    item_type = s.unpack("I", f"the element type of array {key!r}")
    n = s.unpack("Q", f"the length of array {key!r}")
    if item_type in _SCALARS:
        code, size = _SCALARS[item_type]
        if n * size > s.remaining:
            raise s.fail(
                f"array {key!r} claims {n} {_VALUE_TYPE_NAMES[item_type]} elements "
                f"({n * size} bytes) but only {s.remaining} bytes remain",
                start,
            )
        if n > KEEP_NUMERIC_ARRAY_MAX:
            s.skip(n * size, f"array {key!r}")
            return ArraySummary(_VALUE_TYPE_NAMES[item_type], n)
        values = list(struct.unpack(f"{s.endian}{n}{code}", s.read(n * size, f"array {key!r}")))
        return [bool(v) for v in values] if item_type == 7 else values
    if item_type == _STRING:
        if n * 8 > s.remaining:  # every string has at least its 8-byte length
            raise s.fail(f"array {key!r} claims {n} strings but only {s.remaining} bytes remain", start)
        if key == "tokenizer.ggml.tokens":
            return tuple(s.strings(n, f"array {key!r}", keep=True) or ())
        if key.startswith("tokenizer.") or n > KEEP_NUMERIC_ARRAY_MAX:
            s.strings(n, f"array {key!r}", keep=False)
            return ArraySummary("string", n)
        return [_decode(b) for b in s.strings(n, f"array {key!r}", keep=True) or ()]
    if item_type == _ARRAY:
        raise s.fail(f"array {key!r} holds arrays, which llama.cpp's GGUF reader does not accept", start)
    raise s.fail(f"array {key!r} has unknown element type {item_type}", start)


def _read_header(s: _Stream) -> tuple[int, int, int]:
    magic = s.read(4, "the GGUF magic")
    if magic != GGUF_MAGIC:
        raise s.fail(f"not a GGUF file: it starts with {magic!r}, not {GGUF_MAGIC!r}", 0)
    raw_version = s.read(4, "the GGUF version")
    version = struct.unpack("<I", raw_version)[0]
    if version & 0xFFFF == 0 and version >> 16:  # written on a big-endian machine
        s.endian = ">"
        version = struct.unpack(">I", raw_version)[0]
    if version == 1:
        raise s.fail("GGUF version 1 is not supported (llama.cpp reads versions 2 and 3)", 4)
    if version not in (2, 3):
        raise s.fail(f"unsupported GGUF version {version} (llama.cpp reads versions 2 and 3)", 4)
    n_tensors = s.unpack("Q", "the tensor count")
    n_kv = s.unpack("Q", "the metadata key count")
    # a key needs at least 8 (key length) + 4 (type) + 1 bytes; a tensor entry 8 + 4 + 4 + 8
    if n_kv * 13 > s.remaining:
        raise s.fail(
            f"the header claims {n_kv} metadata keys, more than the {s.remaining} remaining bytes can hold", 16
        )
    if n_tensors * 24 > s.remaining:
        raise s.fail(f"the header claims {n_tensors} tensors, more than the {s.remaining} remaining bytes can hold", 8)
    return version, n_tensors, n_kv


def _read_tensor_info(s: _Stream, index: int, alignment_check: int) -> tuple[str, tuple[int, ...], int, int, int]:
    start = s.pos
    name = _decode(s.string(f"the name of tensor {index}"))
    n_dims = s.unpack("I", f"the dimension count of tensor {name!r}")
    if n_dims > MAX_DIMS:
        raise s.fail(f"tensor {name!r} has {n_dims} dimensions; ggml allows at most {MAX_DIMS}", start)
    shape = tuple(s.unpack("Q", f"dimension {d} of tensor {name!r}") for d in range(n_dims))
    n_elements = 1
    for dim in shape:
        n_elements *= dim
    if n_elements >= 1 << 63:
        raise s.fail(f"tensor {name!r} has an impossible shape {list(shape)}", start)
    type_id = s.unpack("I", f"the type of tensor {name!r}")
    if type_id not in GGML_TYPES:
        raise s.fail(f"tensor {name!r} has unknown ggml type {type_id}", s.pos - 4)
    type_name, block, type_size = GGML_TYPES[type_id]
    if shape and shape[0] % block:
        raise s.fail(
            f"tensor {name!r} has rows of {shape[0]} elements, not a multiple of the {type_name} block size {block}",
            start,
        )
    offset = s.unpack("Q", f"the data offset of tensor {name!r}")
    if offset % alignment_check:
        raise s.fail(
            f"tensor {name!r} has data offset {offset}, not a multiple of the alignment {alignment_check}", s.pos - 8
        )
    n_bytes = n_elements // block * type_size
    return name, shape, type_id, offset, n_bytes


class GGUFTruncatedError(GGUFInspectError):
    """The header is whole but the tensor data stops short: ``needed`` bytes, ``size`` present."""

    def __init__(self, message: str, needed: int, size: int):
        super().__init__(message)
        self.needed, self.size = needed, size


# What was read, by file identity. A 150k-token vocabulary is about 0.2 s of Python to parse, and one pair
# change asks for each header several times (the Lab's methods, the Models page's check, the chat hint, the
# pre-load check); a GUI thread that parsed each of them froze for over a second (bench/gui_stall.py). A
# file rewritten in place changes its size, mtime or ctime, so it is read again; a read that failed is kept
# too, so that a broken file fails as fast the second time. Four entries: a pair, and the pair before it
# (a 150k-token vocabulary holds about 7 MB). A file written in the last two seconds is not kept: it may
# still be being written, and a rewrite of the same size within one tick of the kernel's coarse clock
# would keep its mtime.
_READ_CACHE_SIZE = 4
_SETTLED_S = 2.0
_read_cache: OrderedDict[tuple, ModelInfo | GGUFInspectError] = OrderedDict()
_read_cache_lock = threading.Lock()


def file_identity(path: Path) -> tuple | None:
    """What tells one version of a file from another: path, device, inode, size, mtime and ctime (None:
    no such file)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _settled(key: tuple) -> bool:
    return time.time() - key[4] / 1e9 > _SETTLED_S


def header_cached(path: str | Path) -> bool:
    """True when inspect_gguf(path) would answer from what it already read, without parsing."""
    key = file_identity(Path(path))
    with _read_cache_lock:
        return key is not None and key in _read_cache


def inspect_gguf(path: str | Path, keep: bool = True, apart: bool = False) -> ModelInfo:
    """Read a GGUF file's header and tensor index. Raises GGUFInspectError for anything unreadable.

    What was read is kept while the file is unchanged; each caller gets its own ModelInfo, metadata dict and
    tensor list (a plan may set a key on its copy), sharing the immutable vocabulary. keep=False reads
    without keeping: a scan of a whole library must not push the pair in use out of the cache. apart: a
    header not yet kept is parsed in a child process (engine.core.child_call: the desktop app's, whose GUI
    thread would wait on the GIL of a parse in a thread), or here when no child can run."""
    path = Path(path)
    key = file_identity(path)
    if key is None:
        return _answer(read_header(path))
    kept = _kept(key)
    if kept is None:
        # One parse of a file at a time: when a pair is chosen, the Lab's check, the Models page and the
        # method list ask for the same two headers at once, and each parse of a 150k-token vocabulary is
        # ~0.1 s of Python holding the GIL that the GUI thread waits on. The second caller waits for the
        # first one's answer (waiting holds no GIL) instead of parsing it again.
        with _PARSE_LOCKS[hash(key) % len(_PARSE_LOCKS)]:
            kept = _kept(key)
            if kept is None:
                kept = _read_apart(path) if apart else read_header(path)
                if keep and key == file_identity(path) and _settled(key):  # unchanged while it was read
                    with _read_cache_lock:
                        _read_cache[key] = kept
                        while len(_read_cache) > _READ_CACHE_SIZE:
                            _read_cache.popitem(last=False)
    return _answer(kept)


# parses of different files run side by side, those of one file one after the other (by its identity's hash)
_PARSE_LOCKS = tuple(threading.Lock() for _ in range(8))


def _kept(key: tuple) -> ModelInfo | GGUFInspectError | None:
    with _read_cache_lock:
        kept = _read_cache.get(key)
        if kept is not None:
            _read_cache.move_to_end(key)
        return kept


def read_header(path: str | Path) -> ModelInfo | GGUFInspectError:
    """One parse: the header, or why it cannot be read (also what a child process runs for apart=True)."""
    try:
        return _read(Path(path))
    except GGUFInspectError as exc:
        return exc


def _read_apart(path: Path) -> ModelInfo | GGUFInspectError:
    from engine.core.child_call import ChildCallError, call

    try:
        answer: ModelInfo | GGUFInspectError = call("engine.models.gguf_inspect", "read_header", path=str(path))
        return answer
    except ChildCallError:
        return read_header(path)  # no child process here (a broken install): parse in this one


def _answer(info: ModelInfo | GGUFInspectError) -> ModelInfo:
    if isinstance(info, GGUFInspectError):
        raise info.with_traceback(None)
    return _own_copy(info)


def _own_copy(info: ModelInfo) -> ModelInfo:
    return replace(info, metadata=dict(info.metadata), tensors=list(info.tensors))


def _read(path: Path) -> ModelInfo:
    try:
        size = path.stat().st_size
        fh = open(path, "rb", buffering=0)
    except FileNotFoundError:
        raise GGUFInspectError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise GGUFInspectError(f"{path}: is a directory, not a GGUF file") from None
    except OSError as exc:
        raise GGUFInspectError(f"{path}: cannot be opened ({exc.strerror or exc})") from None
    with fh:
        return _parse(_Stream(fh, size, path.name), str(path))


def _parse(s: _Stream, path: str) -> ModelInfo:
    version, n_tensors, n_kv = _read_header(s)
    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        start = s.pos
        key = _decode(s.string(f"the name of metadata key {i}"))
        if key in metadata:
            raise s.fail(f"metadata key {key!r} appears twice", start)
        value_type = s.unpack("I", f"the value type of key {key!r}")
        metadata[key] = _read_value(s, value_type, key)

    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
        raise s.fail(f"general.alignment is {alignment!r}; it must be a power of two")

    raw_tensors = []
    names: set[str] = set()
    for i in range(n_tensors):
        start = s.pos
        entry = _read_tensor_info(s, i, alignment)
        if entry[0] in names:
            raise s.fail(f"tensor {entry[0]!r} appears twice", start)
        names.add(entry[0])
        raw_tensors.append(entry)

    data_offset = s.pos + (-s.pos) % alignment
    tensors = []
    end = max((data_offset + offset + n_bytes for _, _, _, offset, n_bytes in raw_tensors), default=0)
    for name, shape, type_id, offset, n_bytes in raw_tensors:
        start = data_offset + offset
        if start + n_bytes > s.size:
            raise GGUFTruncatedError(
                f"{s.name}: truncated: tensor {name!r} needs bytes {start}..{start + n_bytes} "
                f"but the file ends at {s.size} (at byte offset {min(start, s.size)})",
                needed=end,
                size=s.size,
            )
        tensors.append(TensorInfo(name, shape, GGML_TYPES[type_id][0], type_id, start, _product(shape), n_bytes))
    vocab = vocab_info(metadata)
    # the token list lives in VocabInfo; the metadata keeps only its summary
    if isinstance(metadata.get("tokenizer.ggml.tokens"), tuple):
        metadata["tokenizer.ggml.tokens"] = ArraySummary("string", len(metadata["tokenizer.ggml.tokens"]))
    return ModelInfo(path, s.size, version, alignment, data_offset, metadata, tensors, vocab)


def _product(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# -- the vocabulary as llama.cpp resolves it -----------------------------------------

# tokenizer.ggml.model -> (llama_vocab_type, default BOS, default EOS), from llama_vocab::impl::load
_TOKENIZER_DEFAULTS = {
    "llama": ("SPM", 1, 2),
    "bert": ("WPM", 101, TOKEN_NULL),
    "gpt2": ("BPE", 11, 11),
    "hybriddna": ("BPE", 11, 11),
    "whitespace": ("BPE", 11, 11),
    "t5": ("UGM", TOKEN_NULL, 1),
    "rwkv": ("RWKV", TOKEN_NULL, TOKEN_NULL),
    "test": ("TEST", TOKEN_NULL, TOKEN_NULL),
    "plamo2": ("PLAMO2", 1, 2),
    "gemma4": ("BPE", TOKEN_NULL, TOKEN_NULL),
}
# default add_bos / add_eos per vocab type (BPE: per pre-tokenizer, below); others start false
_ADD_DEFAULTS = {"SPM": (True, False), "WPM": (True, False), "UGM": (False, True), "RWKV": (False, False)}
# BPE pre-tokenizers for which llama.cpp turns add_bos on
_BPE_PRE_ADD_BOS = {
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "falcon-h1",
    "pixtral",
    "midm-2.0",
    "lfm2",
    "jina-v5-nano",
    "tekken",
    "chameleon",
}
# BPE pre-tokenizers for which llama.cpp drops the BOS token
_BPE_PRE_NO_BOS = {"chatglm-bpe", "glm4", "glm5"}
# pre-tokenizers that llama.cpp maps to LLAMA_VOCAB_PRE_TYPE_GEMMA4 (add_bos forced on)
_GEMMA4_PRE = {"gemma4", "granite-embed-multi-311m"}


def _int_key(metadata: dict[str, Any], key: str) -> int | None:
    value = metadata.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def vocab_info(metadata: dict[str, Any]) -> VocabInfo:
    """Vocab type, special tokens and add flags exactly as llama_vocab::impl::load settles them."""
    model = metadata.get("tokenizer.ggml.model")
    model = model if isinstance(model, str) else None
    pre = metadata.get("tokenizer.ggml.pre")
    pre = pre if isinstance(pre, str) else None
    raw_tokens = metadata.get("tokenizer.ggml.tokens")
    tokens = raw_tokens if isinstance(raw_tokens, tuple) else ()
    fingerprint = hashlib.sha256(b"\x00".join(tokens)).hexdigest()[:16] if tokens else None

    def result(
        vocab_type: str, n_tokens: int, bos: int, eos: int, add_bos: bool, add_eos: bool, error: str | None = None
    ) -> VocabInfo:
        return VocabInfo(model, pre, vocab_type, n_tokens, bos, eos, add_bos, add_eos, fingerprint, error, tokens)

    def refused(error: str) -> VocabInfo:
        return result("NONE", len(tokens), TOKEN_NULL, TOKEN_NULL, False, False, error)

    if model is None:
        return refused("tokenizer.ggml.model is missing; llama.cpp cannot load this vocabulary")
    if model in ("no_vocab", "none"):
        # llama.cpp returns early: dummy tokens, no special tokens, no flags
        n = _int_key(metadata, f"{metadata.get('general.architecture')}.vocab_size") or 0
        return result("NONE", n, TOKEN_NULL, TOKEN_NULL, False, False)
    if model not in _TOKENIZER_DEFAULTS:
        return refused(f"unknown tokenizer model {model!r}; llama.cpp refuses to load it")
    vocab_type, bos, eos = _TOKENIZER_DEFAULTS[model]
    if model == "gemma4":
        pre = "gemma4"
    add_bos, add_eos = _ADD_DEFAULTS.get(vocab_type, (False, False))
    if vocab_type == "BPE":
        if pre in _BPE_PRE_ADD_BOS:
            add_bos = True
        if pre in _BPE_PRE_NO_BOS:
            bos = TOKEN_NULL
    error = None
    if raw_tokens is None:
        error = "tokenizer.ggml.tokens is missing; llama.cpp cannot load this vocabulary"
    elif not isinstance(raw_tokens, tuple):
        error = "tokenizer.ggml.tokens is not an array of strings; llama.cpp cannot load this vocabulary"
    n_tokens = len(tokens)

    # defaults outside the vocabulary are disabled; a key inside it replaces the default
    def special(default: int, key: str) -> int:
        token = TOKEN_NULL if default >= n_tokens else default
        value = _int_key(metadata, key)
        if value is not None and 0 <= value < n_tokens:
            token = value
        return token

    bos = special(bos, "tokenizer.ggml.bos_token_id")
    eos = special(eos, "tokenizer.ggml.eos_token_id")
    if isinstance(metadata.get("tokenizer.ggml.add_bos_token"), bool):
        add_bos = metadata["tokenizer.ggml.add_bos_token"]
    if isinstance(metadata.get("tokenizer.ggml.add_eos_token"), bool):
        add_eos = metadata["tokenizer.ggml.add_eos_token"]
    if vocab_type == "BPE" and pre in _GEMMA4_PRE:
        add_bos = True
    return result(vocab_type, n_tokens, bos, eos, add_bos, add_eos, error)


# -- command line ---------------------------------------------------------------


def format_report(info: ModelInfo) -> str:
    """The human-readable summary the CLI prints."""
    d = info.to_dict()
    v = d["vocab"]

    lines = [
        f"{Path(info.path).name}: {d['architecture'] or 'unknown architecture'}"
        + (f" ({d['name']})" if d["name"] else ""),
        f"  parameters  {d['parameter_count']:,} in {d['tensor_count']} tensors, {format_plan_bytes(d['tensor_bytes'])}"
        f" ({d['file_type_name'] or 'file type not stated'})",
        f"  shape       {d['block_count']} layers, n_embd {d['n_embd']}, heads {d['n_head']} "
        f"(KV {d['n_head_kv']}), head dims {d['head_dim_k']}/{d['head_dim_v']}, n_ff {d['n_ff']}, "
        f"trained context {d['n_ctx_train']}",
        f"  vocab       {v['tokenizer_model']} ({v['vocab_type']}"
        + (f", pre {v['tokenizer_pre']}" if v["tokenizer_pre"] else "")
        + f"), {v['n_tokens']} tokens, BOS {v['bos_id']} (add {str(v['add_bos']).lower()}), "
        f"EOS {v['eos_id']} (add {str(v['add_eos']).lower()}), fingerprint {v['fingerprint']}",
        f"  chat template {'yes' if d['has_chat_template'] else 'no'}; speculative role "
        f"{d['speculative_role'] or 'none'}" + (f" ({d['nextn_layers']} next-n layers)" if d["nextn_layers"] else ""),
    ]
    if v["load_error"]:
        lines.append(f"  warning     {v['load_error']}")
    if d["quantization_mix"]:
        lines.append("  quantization mix:")
        for type_name, entry in d["quantization_mix"].items():
            lines.append(f"    {type_name:<8} {entry['tensors']:5d} tensors  {format_plan_bytes(entry['bytes']):>12}")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m engine.models.gguf_inspect FILE
    import json

    if len(sys.argv) != 2:
        sys.exit("usage: python -m engine.models.gguf_inspect FILE")
    try:
        print(json.dumps(inspect_gguf(sys.argv[1]).to_dict(), indent=2))
    except GGUFInspectError as exc:
        sys.exit(f"error: {exc}")
