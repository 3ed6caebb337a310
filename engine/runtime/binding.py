"""ctypes binding of native/include/specrt.h.

Only the engine worker process imports this module: llama.cpp may abort the
process on some errors, and the GUI or CLI must outlive that. Everything here
mirrors the header one to one; the settings dataclasses live in engine.core.settings.
"""

from __future__ import annotations

import codecs
import ctypes as C
import json
import os
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.llama.backends import load_backends
from engine.runtime.native_build import ensure_built

ABI_VERSION = 8
MAX_CYCLE_TOKENS = 256

OK, DONE = 0, 1
STATUS_NAMES = {
    -1: "invalid_argument",
    -2: "load_failed",
    -3: "incompatible",
    -4: "bad_state",
    -5: "decode_failed",
    -6: "cancelled",
    -7: "context_full",
    -8: "internal",
    -9: "unsupported",  # engine.runtime.server_engine: what llama-server cannot do
}


class SpecrtError(RuntimeError):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.kind = STATUS_NAMES.get(code, f"error_{code}")
        self.exit_code: int | None = None  # a llama-server that died (engine.measure.server_engine)


# bool (*)(int32_t stage, float progress, void * user): stage 0 target, 1 draft; False stops the load
_PROGRESS_FN = C.CFUNCTYPE(C.c_bool, C.c_int32, C.c_float, C.c_void_p)
LOAD_STAGES = ("target", "draft")


class _LoadParams(C.Structure):
    _fields_ = [
        ("target_path", C.c_char_p),
        ("draft_path", C.c_char_p),
        ("n_ctx", C.c_int32),
        ("n_batch", C.c_int32),
        ("n_ubatch", C.c_int32),
        ("n_gpu_layers", C.c_int32),
        ("n_gpu_layers_draft", C.c_int32),
        ("n_threads", C.c_int32),
        ("n_threads_batch", C.c_int32),
        ("draft_n_max_limit", C.c_int32),
        ("flash_attn", C.c_int32),
        ("verbose", C.c_int32),
        ("no_repack", C.c_int32),
        ("progress", _PROGRESS_FN),
        ("progress_user", C.c_void_p),
        ("n_cpu_moe", C.c_int32),
        ("n_cpu_moe_draft", C.c_int32),
        ("draft_devices", C.c_char_p),
        ("devices", C.c_char_p),
        ("draft_n_max_at_load", C.c_int32),
        ("lock_in_ram", C.c_int32),
    ]


class _SpecParams(C.Structure):
    _fields_ = [
        ("types", C.c_char_p),
        ("draft_n_max", C.c_int32),
        ("draft_n_min", C.c_int32),
        ("draft_p_min", C.c_float),
        ("ngram_size_n", C.c_int32),
        ("ngram_size_m", C.c_int32),
        ("ngram_min_hits", C.c_int32),
        ("ngram_mod_n_match", C.c_int32),
        ("ngram_mod_n_min", C.c_int32),
        ("ngram_mod_n_max", C.c_int32),
    ]


class _SamplingParams(C.Structure):
    _fields_ = [
        ("temp", C.c_float),
        ("top_k", C.c_int32),
        ("top_p", C.c_float),
        ("min_p", C.c_float),
        ("seed", C.c_uint32),
    ]


class _Cycle(C.Structure):
    _fields_ = [
        ("index", C.c_int32),
        ("is_prompt", C.c_int32),
        ("n_prompt", C.c_int32),
        ("n_drafted", C.c_int32),
        ("n_accepted", C.c_int32),
        ("n_emitted", C.c_int32),
        ("n_past", C.c_int32),
        ("draft_n_max", C.c_int32),
        ("is_eog", C.c_int32),
        ("settings_epoch", C.c_int32),
        ("draft_ms", C.c_double),
        ("verify_ms", C.c_double),
        ("decode_ms", C.c_double),
        ("other_ms", C.c_double),
        ("cycle_ms", C.c_double),
        ("tokens", C.c_int32 * MAX_CYCLE_TOKENS),
        ("piece_bytes", C.c_int32 * MAX_CYCLE_TOKENS),
        ("text", C.c_void_p),  # not c_char_p: a token may be a NUL byte; piece_bytes give the length
        ("replayed", C.c_int32),
    ]


class _MemoryItem(C.Structure):
    _fields_ = [
        ("model", C.c_char * 16),
        ("buffer_type", C.c_char * 64),
        ("model_bytes", C.c_uint64),
        ("context_bytes", C.c_uint64),
        ("compute_bytes", C.c_uint64),
    ]


@dataclass
class Cycle:
    """One verify step as specrt reports it (see specrt_cycle in specrt.h)."""

    index: int
    is_prompt: bool
    n_prompt: int
    drafted: int
    accepted: int
    emitted: int
    n_past: int
    draft_n_max: int
    is_eog: bool
    settings_epoch: int
    draft_ms: float
    verify_ms: float
    decode_ms: float
    other_ms: float
    cycle_ms: float
    tokens: list[int]
    text: str
    pieces: list[str]  # text per emitted token (a piece may be "" while a character is incomplete)
    # a hybrid target restored its state and verified the accepted tokens again (one more target pass)
    replayed: bool = False
    # the cycle's wall time as the engine itself measured it (llama-server's clock), used instead of the
    # worker's timing of step(); None: the worker times it
    wall_ms: float | None = None


_lib: C.CDLL | None = None
_lib_lock = threading.Lock()


def load_library(path: Path | None = None) -> C.CDLL:
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        path = path or ensure_built()
        if sys.platform == "win32":
            # specrt.dll (in the cache, or lib\ of the bundle) must find llama.dll and ggml*.dll next to llama-server
            from engine.llama.install import find_install

            os.add_dll_directory(str(find_install().bin_dir))
        # libspecrt first, with libllama, libllama-common and libggml behind it, then the backend modules
        # from the install: llama-server's order (its libraries come with the program, the modules when it
        # starts). The other order, modules first, died inside dlopen(libspecrt) on an H200 with the CUDA
        # module loaded while llama-server ran there (bench/results/gpu_check-2026-12-04-1332.txt).
        # Nothing runs llama_backend_init() before the modules are in: libspecrt calls it on first use, and
        # it would otherwise look for them beside the Python interpreter and in the working directory
        # (engine.llama.backends).
        # said first: should the loader die in there, the client names the library it died in
        print(f"specrt: loading {path}", file=sys.stderr, flush=True)
        lib = C.CDLL(str(path))
        backends = load_backends()
        if backends.error:
            raise SpecrtError(-2, f"llama.cpp has no backend to run on: {backends.error}")
        P = C.POINTER
        sig = {
            "specrt_abi_version": ([], C.c_int32),
            "specrt_build_info": ([], C.c_char_p),
            "specrt_devices": ([], C.c_char_p),
            "specrt_last_load_error": ([], C.c_char_p),
            "specrt_load": ([P(_LoadParams), P(C.c_void_p)], C.c_int32),
            "specrt_free": ([C.c_void_p], None),
            "specrt_error": ([C.c_void_p], C.c_char_p),
            "specrt_has_draft": ([C.c_void_p], C.c_int32),
            "specrt_n_ctx": ([C.c_void_p], C.c_int32),
            "specrt_set_spec": ([C.c_void_p, P(_SpecParams)], C.c_int32),
            "specrt_set_sampling": ([C.c_void_p, P(_SamplingParams)], C.c_int32),
            "specrt_begin": ([C.c_void_p, C.c_char_p, C.c_int32, C.c_int32], C.c_int32),
            "specrt_forget": ([C.c_void_p], C.c_int32),
            "specrt_step": ([C.c_void_p, P(_Cycle)], C.c_int32),
            "specrt_cancel": ([C.c_void_p], None),
            "specrt_tokenize": ([C.c_void_p, C.c_char_p, C.c_int32, P(C.c_int32), C.c_int32, P(C.c_int32)], C.c_int32),
            "specrt_detokenize": (
                [C.c_void_p, P(C.c_int32), C.c_int32, C.c_char_p, C.c_int32, P(C.c_int32)],
                C.c_int32,
            ),
            "specrt_memory": ([C.c_void_p, P(_MemoryItem), C.c_int32], C.c_int32),
            "specrt_chat_prompt": ([C.c_void_p, C.c_char_p, C.c_char_p, C.c_int32, P(C.c_int32)], C.c_int32),
            "specrt_time_forward": ([C.c_void_p, C.c_int32, C.c_int32, C.c_int32, C.c_int32, P(C.c_double)], C.c_int32),
        }
        for name, (args, res) in sig.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = res
        abi = lib.specrt_abi_version()
        if abi != ABI_VERSION:
            raise SpecrtError(-8, f"libspecrt ABI {abi} does not match this engine's {ABI_VERSION}; rebuild native/")
        _lib = lib
        return lib


def build_info() -> str:
    return load_library().specrt_build_info().decode(errors="replace")


def devices() -> list[dict[str, str]]:
    out = []
    for line in load_library().specrt_devices().decode(errors="replace").splitlines():
        name, _, desc = line.partition("\t")
        out.append({"name": name, "description": desc})
    return out


class Engine:
    """A loaded target (and optional draft). Not thread-safe except cancel()."""

    def __init__(self, settings: LoadSettings, progress: Callable[[str, float], bool] | None = None):
        """Load the pair. ``progress(stage, fraction)`` ("target" or "draft", 0..1) is called as
        llama.cpp reads the weights, on this thread; returning False stops the load, which then
        raises SpecrtError with kind "cancelled"."""
        self._lib = load_library()

        def report(stage: int, fraction: float, _user) -> bool:
            try:
                return progress is None or bool(progress(LOAD_STAGES[min(stage, 1)], float(fraction)))
            except Exception:  # noqa: BLE001 - an exception cannot cross into C; a broken reporter must not stop a load
                traceback.print_exc()
                return True

        callback = _PROGRESS_FN(report) if progress is not None else _PROGRESS_FN()
        p = _LoadParams(
            target_path=str(settings.target).encode(),
            draft_path=str(settings.draft).encode() if settings.draft else None,
            n_ctx=settings.ctx,
            n_batch=settings.n_batch,
            n_ubatch=settings.n_ubatch,
            n_gpu_layers=settings.ngl,
            n_gpu_layers_draft=settings.ngl_draft,
            n_threads=settings.threads,
            n_threads_batch=settings.threads_batch,
            draft_n_max_limit=settings.draft_n_max_limit,
            flash_attn=settings.flash_attn,
            verbose=1 if settings.verbose else 0,
            no_repack=0 if settings.repack else 1,
            progress=callback,
            progress_user=None,
            n_cpu_moe=settings.n_cpu_moe,
            n_cpu_moe_draft=settings.n_cpu_moe_draft,
            draft_n_max_at_load=settings.draft_n_max_at_load,
            lock_in_ram=1 if settings.lock_in_ram else 0,
            draft_devices=settings.device_draft.encode() if settings.device_draft else None,
            devices=settings.device.encode() if settings.device else None,
        )
        handle = C.c_void_p()
        rc = self._lib.specrt_load(C.byref(p), C.byref(handle))
        if rc != OK:
            raise SpecrtError(rc, self._lib.specrt_last_load_error().decode(errors="replace"))
        self._h = handle
        self._cycle = _Cycle()
        # a cycle may end inside a multi-byte character (byte tokens): decode the stream, not each cycle
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    # -- lifecycle --------------------------------------------------------
    def close(self) -> None:
        if self._h:
            self._lib.specrt_free(self._h)
            self._h = C.c_void_p()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check(self, rc: int) -> int:
        if rc < 0:
            raise SpecrtError(rc, self._lib.specrt_error(self._h).decode(errors="replace"))
        return rc

    # -- queries ----------------------------------------------------------
    @property
    def has_draft(self) -> bool:
        return bool(self._lib.specrt_has_draft(self._h))

    @property
    def n_ctx(self) -> int:
        return int(self._lib.specrt_n_ctx(self._h))

    def memory(self) -> list[dict]:
        n = self._check(self._lib.specrt_memory(self._h, None, 0))
        items = (_MemoryItem * max(n, 1))()
        n = self._check(self._lib.specrt_memory(self._h, items, n))
        return [
            {
                "model": it.model.decode(),
                "buffer_type": it.buffer_type.decode(),
                "model_bytes": it.model_bytes,
                "context_bytes": it.context_bytes,
                "compute_bytes": it.compute_bytes,
            }
            for it in items[:n]
        ]

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        raw, need = text.encode(), C.c_int32()
        self._check(self._lib.specrt_tokenize(self._h, raw, int(add_special), None, 0, C.byref(need)))
        buf = (C.c_int32 * max(need.value, 1))()
        self._check(self._lib.specrt_tokenize(self._h, raw, int(add_special), buf, need.value, C.byref(need)))
        return list(buf[: need.value])

    def detokenize(self, tokens: list[int]) -> str:
        arr, need = (C.c_int32 * max(len(tokens), 1))(*tokens), C.c_int32()
        self._check(self._lib.specrt_detokenize(self._h, arr, len(tokens), None, 0, C.byref(need)))
        buf = C.create_string_buffer(need.value)
        self._check(self._lib.specrt_detokenize(self._h, arr, len(tokens), buf, need.value, C.byref(need)))
        return buf.value.decode(errors="replace")

    def chat_prompt(self, messages: list[dict], template_kwargs: dict | None = None) -> dict:
        """The prompt llama-server's /v1/chat/completions would build from these messages with
        the target's chat template, and what it knows of the template (see specrt.h)."""
        request: dict = {"messages": messages}
        if template_kwargs:
            request["chat_template_kwargs"] = template_kwargs
        raw, need = json.dumps(request, ensure_ascii=False).encode(), C.c_int32()
        self._check(self._lib.specrt_chat_prompt(self._h, raw, None, 0, C.byref(need)))
        buf = C.create_string_buffer(need.value)
        self._check(self._lib.specrt_chat_prompt(self._h, raw, buf, need.value, C.byref(need)))
        return json.loads(buf.value.decode())

    # -- settings ---------------------------------------------------------
    def set_spec(self, s: SpecSettings) -> None:
        p = _SpecParams(
            types=s.spec_type.encode(),
            draft_n_max=s.draft_n_max,
            draft_n_min=s.draft_n_min,
            draft_p_min=s.draft_p_min,
            ngram_size_n=s.ngram_size_n,
            ngram_size_m=s.ngram_size_m,
            ngram_min_hits=s.ngram_min_hits,
            ngram_mod_n_match=s.ngram_mod_n_match,
            ngram_mod_n_min=s.ngram_mod_n_min,
            ngram_mod_n_max=s.ngram_mod_n_max,
        )
        self._check(self._lib.specrt_set_spec(self._h, C.byref(p)))

    def set_sampling(self, s: SamplingSettings) -> None:
        p = _SamplingParams(temp=s.temp, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p, seed=s.seed & 0xFFFFFFFF)
        self._check(self._lib.specrt_set_sampling(self._h, C.byref(p)))

    # -- generation -------------------------------------------------------
    def begin(self, prompt: str, max_tokens: int, baseline: bool = False) -> None:
        self._check(self._lib.specrt_begin(self._h, prompt.encode(), max_tokens, int(baseline)))
        self._utf8.reset()

    def forget(self) -> None:
        """The next generation's speculators start as a freshly started llama-server's: nothing an n-gram
        pool or cache learned from earlier generations (specrt_forget)."""
        self._check(self._lib.specrt_forget(self._h))

    def step(self) -> Cycle | None:
        """One cycle, or None when the generation has ended."""
        c = self._cycle
        rc = self._check(self._lib.specrt_step(self._h, C.byref(c)))
        if rc == DONE:
            return None
        raw = C.string_at(c.text, sum(c.piece_bytes[: c.n_emitted])) if c.text else b""
        pieces, offset = [], 0
        for i in range(c.n_emitted):
            n = c.piece_bytes[i]
            pieces.append(self._utf8.decode(raw[offset : offset + n]))
            offset += n
        if c.is_eog:
            tail = self._utf8.decode(b"", final=True)
            if pieces and tail:
                pieces[-1] += tail
        return Cycle(
            index=c.index,
            is_prompt=bool(c.is_prompt),
            n_prompt=c.n_prompt,
            drafted=c.n_drafted,
            accepted=c.n_accepted,
            emitted=c.n_emitted,
            n_past=c.n_past,
            draft_n_max=c.draft_n_max,
            is_eog=bool(c.is_eog),
            settings_epoch=c.settings_epoch,
            draft_ms=c.draft_ms,
            verify_ms=c.verify_ms,
            decode_ms=c.decode_ms,
            other_ms=c.other_ms,
            cycle_ms=c.cycle_ms,
            tokens=list(c.tokens[: c.n_emitted]),
            text="".join(pieces),
            pieces=pieces,
            replayed=bool(c.replayed),
        )

    def time_forward(self, which: str, n_tokens: int, n_past: int = 256, reps: int = 5) -> float:
        """Median ms of one forward pass of n_tokens on 'target' or 'draft' (between generations only)."""
        out = C.c_double()
        code = {"target": 0, "draft": 1}[which]
        self._check(self._lib.specrt_time_forward(self._h, code, n_tokens, n_past, reps, C.byref(out)))
        return out.value

    def text_tail(self) -> str:
        """Bytes of an unfinished character held back at the end of a generation, decoded."""
        return self._utf8.decode(b"", final=True)

    def cancel(self) -> None:
        """Safe from any thread."""
        if self._h:
            self._lib.specrt_cancel(self._h)
