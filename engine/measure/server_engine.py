"""SpecTune's engine API on top of llama-server: the second engine, for machines where libspecrt cannot
load (the one H200 run died inside dlopen(libspecrt) while llama-server ran) and for users who want their
own llama-server build (CUDA, ROCm, Vulkan, Metal, newer than the pin) measured.

``ServerEngine`` has the methods engine.runtime.worker asks of engine.runtime.binding.Engine, so the
worker, the client, the CLI, the tuner and the app drive it unchanged (``python -m
engine.measure.server_worker``). Each generation is one streamed POST /completion with ``timings_per_token``:

- llama-server adds a step's draft to ``draft_n`` before it verifies it, and its accepted tokens to
  ``draft_n_accepted`` before it sends them, then sends the step's 1 + accepted tokens one chunk each
  (tools/server/server-context.cpp of the pinned llama.cpp). So the counters every chunk carries cut the
  stream back into verify steps: drafted and accepted per step, identical to the native engine's at
  temperature 0 (tests/test_server_engine.py).
- times come from llama-server's own clock (``predicted_ms``), so tokens/s is the server's, not the
  stream's delivery.
- what llama-server fixes at its start (the method, K, the n-gram sizes, the sampling flags) takes a
  restart: the next generation starts a server with the new argv and says so (``begin`` returns
  ``{"server_restarted": True, ...}``, which the worker adds to its ``started`` event for the Lab's chart).
  A baseline runs on a server with the target alone. Two servers may stay up on a machine without a GPU
  (mmap shares the weights' pages), one with a GPU (VRAM is not shared).

What it cannot do: time single forward passes (the tuner's calibration; ``time_forward`` says so). The
buffer sizes (``memory``) are read from llama-server's log at load, to about 5 KiB.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.deploy.export import ExportError, server_argv
from engine.llama.dialect import ServerDialect, detect_dialect, read_help, resolve_server
from engine.llama.server import LlamaServer, ServerError, memory_from_log
from engine.runtime.binding import Cycle, SpecrtError

# SpecrtError codes (engine.runtime.binding.STATUS_NAMES)
_LOAD_FAILED, _DECODE_FAILED, _CANCELLED, _INVALID, _UNSUPPORTED = -2, -5, -6, -1, -9
REQUEST_TIMEOUT_S = 600.0
NO_SPECULATION = SpecSettings(spec_type="none")


class _Stream:
    """One streamed /completion: its server-sent events as dicts, closable from another thread."""

    def __init__(self, srv: LlamaServer, body: dict):
        self._conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=REQUEST_TIMEOUT_S)
        self._conn.request(
            "POST",
            "/completion",
            body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {srv.api_key}"},
        )
        self._resp = self._conn.getresponse()
        if self._resp.status != 200:
            detail = self._resp.read().decode(errors="replace")[:500]
            self.close()
            raise ServerError(f"llama-server answered {self._resp.status} to POST /completion: {detail}")

    def next_chunk(self) -> dict | None:
        """The next data chunk, or None at the end of the stream."""
        while True:
            line = self._resp.readline()
            if not line:
                return None
            line = line.strip()
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                return json.loads(line[6:])

    def interrupt(self) -> None:
        """Safe from any thread: a reader blocked in next_chunk() wakes with the end of the stream, and
        llama-server stops the generation when it sees the connection gone. Only the socket is shut: the
        reading thread still owns the response and closes it (close)."""
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """From the reading thread, when it is done with the stream."""
        self.interrupt()
        self._conn.close()


def _counters(chunk: dict) -> tuple[int, int, float]:
    t = chunk.get("timings") or {}
    return int(t.get("draft_n", 0)), int(t.get("draft_n_accepted", 0)), float(t.get("predicted_ms", 0.0))


class _Generation:
    """One generation's stream cut back into verify steps (see the module docstring)."""

    def __init__(self, stream: _Stream, k: int):
        self.stream, self.k = stream, k
        self.index = 0
        self.n_past = 0
        self.drafted = self.accepted = 0  # the counters at the end of the last step returned
        self.ms = 0.0  # predicted_ms at the end of the last step returned
        self.held: dict | None = None  # a chunk read ahead: the first of the next step
        self.ended = False

    def _read(self) -> dict | None:
        if self.held is not None:
            held, self.held = self.held, None
            return held
        if self.ended:
            return None
        chunk = self.stream.next_chunk()
        if chunk is None:
            self.ended = True
        return chunk

    def step(self) -> Cycle | None:
        first = self._read()
        if first is None:
            return None
        if self.index == 0:
            t = first.get("timings") or {}
            n_prompt = int(t.get("prompt_n", 0))
            self.n_past = n_prompt
            chunks = [first]
            cycle_ms = float(t.get("prompt_ms", 0.0))
            drafted = accepted = 0
            self.ms = float(t.get("predicted_ms", 0.0))
            is_prompt = True
        else:
            d, a, _ = _counters(first)
            drafted, accepted = d - self.drafted, a - self.accepted
            if first.get("stop") and not first.get("tokens") and (drafted, accepted) == (0, 0):
                self.ended = True  # the closing chunk: no token of its own, it only ends the stream
                return None
            chunks = [first]
            # the step's tokens: 1 + accepted, all carrying the same counters; a chunk with other counters, or
            # one past that count, opens the next step (a step without a draft sends one token)
            while len(chunks) < 1 + accepted and not chunks[-1].get("stop"):
                nxt = self._read()
                if nxt is None:
                    break
                if _counters(nxt)[:2] != (d, a):
                    self.held = nxt
                    break
                chunks.append(nxt)
            end_ms = _counters(chunks[-1])[2]
            cycle_ms = max(end_ms - self.ms, 0.0)
            self.ms = end_ms
            self.drafted, self.accepted = d, a
            n_prompt = 0
            is_prompt = False
        tokens = [tok for c in chunks for tok in (c.get("tokens") or [])]
        pieces = [str(c.get("content", "")) for c in chunks]
        # the final chunk (stop) may carry no token of its own: it closes the stream
        emitted = sum(1 for c in chunks if c.get("tokens")) if any("tokens" in c for c in chunks) else len(chunks)
        last = chunks[-1]
        is_eog = bool(last.get("stop")) and last.get("stop_type") == "eos"
        self.n_past += emitted
        cycle = Cycle(
            index=self.index,
            is_prompt=is_prompt,
            n_prompt=n_prompt,
            drafted=drafted,
            accepted=min(accepted, drafted),
            emitted=emitted,
            n_past=self.n_past,
            draft_n_max=self.k,
            is_eog=is_eog,
            settings_epoch=0,
            draft_ms=0.0,
            verify_ms=cycle_ms,
            decode_ms=0.0,
            other_ms=0.0,
            cycle_ms=cycle_ms,
            tokens=tokens,
            text="".join(pieces),
            pieces=pieces,
            wall_ms=cycle_ms,
        )
        self.index += 1
        return cycle


class ServerEngine:
    """A loaded pair, run by llama-server. Not thread-safe except cancel()."""

    applies_mid_run = False  # a knob changed during a generation counts from the next one (a restart)

    def __init__(
        self,
        settings: LoadSettings,
        progress: Callable[[str, float], bool] | None = None,
        server: str | Path | None = None,
        keep_two: bool = True,
    ):
        self._load = settings
        self._path = resolve_server(server)
        try:
            self._dialect: ServerDialect = detect_dialect(read_help(self._path))
        except Exception as exc:  # noqa: BLE001 - a binary that is not a llama-server, said as such
            raise SpecrtError(_LOAD_FAILED, f"{self._path} does not answer --help as llama-server does: {exc}") from exc
        self._keep = 2 if keep_two else 1
        self._servers: list[tuple[tuple[str, ...], LlamaServer]] = []  # most recently used last
        self._spec = SpecSettings() if settings.draft is not None else NO_SPECULATION
        self._sampling = SamplingSettings()
        self._gen: _Generation | None = None
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        if progress is not None and not progress("target", 0.0):
            raise SpecrtError(_CANCELLED, "the load was cancelled")
        self.notice = ""  # what the load had to change, said to the user (the worker adds it to "loaded")
        # started now, so that a pair llama-server cannot load fails here, as a native load would
        try:
            srv, _ = self._server_for(self._argv(self._spec, baseline=settings.draft is None))
        except SpecrtError as exc:
            if not (settings.repack and exc.exit_code == -signal.SIGILL):
                raise
            # CPU weight repacking on a CPU whose AMX the system does not enable (engine.runtime.client's load)
            self._load = replace(settings, repack=False)
            srv, _ = self._server_for(self._argv(self._spec, baseline=settings.draft is None))
            self.notice = (
                "llama-server died (SIGILL) loading with CPU weight repacking, so it was started again with "
                "repacking off (-nr)"
            )
        # what llama.cpp reported at load (its log at -lv 4), as the native engine's memory() reports it
        self._memory = memory_from_log(srv.log)
        if progress is not None:
            progress("target", 1.0)
            if settings.draft is not None:
                progress("draft", 1.0)

    # -- servers ----------------------------------------------------------
    def _argv(self, spec: SpecSettings, baseline: bool) -> list[str]:
        load = replace(self._load, draft=None) if baseline else self._load
        try:
            return server_argv(
                load,
                NO_SPECULATION if baseline else spec,
                self._sampling,
                self._path,
                self._dialect,
                # -lv 4: the log then has llama.cpp's buffer sizes (memory()); a few dozen lines a request
                extra=["--metrics", *(["-lv", "4"] if self._dialect.accepts("-lv") else [])],
            )
        except ExportError as exc:
            raise SpecrtError(_INVALID, str(exc)) from exc

    def _server_for(self, argv: list[str]) -> tuple[LlamaServer, bool]:
        """The running server for this argv (started when there is none); True when it was started now."""
        key = tuple(argv)
        for i, (k, srv) in enumerate(self._servers):
            if k == key and srv.running:
                self._servers.append(self._servers.pop(i))
                return srv, False
        while len(self._servers) >= self._keep:
            self._servers.pop(0)[1].stop()
        srv = LlamaServer(argv, log_lines=4000)  # the whole load, for memory_from_log
        try:
            srv.start()
        except ServerError as exc:
            err = SpecrtError(_LOAD_FAILED, f"llama-server could not load the pair: {exc}")
            err.exit_code = exc.exit_code
            raise err from exc
        self._servers.append((key, srv))
        return srv, True

    @property
    def server_path(self) -> Path:
        return self._path

    @property
    def build_info(self) -> str:
        srv = self._servers[-1][1] if self._servers else None
        try:
            return str(((srv.props() if srv else None) or {}).get("build_info", ""))
        except ServerError:
            return ""

    # -- the Engine API the worker uses --------------------------------------
    def close(self) -> None:
        self.cancel()
        while self._servers:
            self._servers.pop()[1].stop()

    @property
    def has_draft(self) -> bool:
        return self._load.draft is not None

    @property
    def n_ctx(self) -> int:
        return self._load.ctx

    def memory(self) -> list[dict]:
        return [dict(item) for item in self._memory]

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        srv = self._servers[-1][1]
        status, out = srv._request("POST", "/tokenize", {"content": text, "add_special": add_special}, 60)
        return list((out or {}).get("tokens", []))

    def chat_prompt(self, messages: list[dict], template_kwargs: dict | None = None) -> dict:
        """The prompt llama-server's chat endpoint builds (its /apply-template), in the native engine's terms."""
        body: dict = {"messages": messages}
        if template_kwargs:
            body["chat_template_kwargs"] = template_kwargs
        try:
            _, out = self._servers[-1][1]._request("POST", "/apply-template", body, 60)
        except ServerError as exc:
            raise SpecrtError(_INVALID, str(exc)) from exc
        return {
            "prompt": (out or {}).get("prompt", ""),
            "format": "llama-server /apply-template",
            "explicit_template": False,
            "supports_thinking": False,
            "enable_thinking": False,
            "additional_stops": [],
        }

    def set_spec(self, s: SpecSettings) -> None:
        self._argv(s, baseline=False)  # a method this llama-server cannot run is refused now
        self._spec = s

    def set_sampling(self, s: SamplingSettings) -> None:
        self._sampling = s

    def forget(self) -> None:
        """llama-server has no request that empties an n-gram pool or cache: for a method that learns
        across requests (SpecSettings.learns_across_requests) the next generation gets a freshly started
        server (and begin says so). Other methods keep theirs: they carry nothing from one request on."""
        if not self._spec.learns_across_requests:
            return
        key = tuple(self._argv(self._spec, baseline=False))
        for i, (k, srv) in enumerate(self._servers):
            if k == key:
                self._servers.pop(i)
                srv.stop()
                return

    def begin(self, prompt: str, max_tokens: int, baseline: bool = False) -> dict:
        """Start a generation; returns what the worker adds to its started event: whether a server was
        (re)started for it, and how long that took."""
        self._cancelled.clear()
        t0 = time.perf_counter()
        srv, started = self._server_for(self._argv(self._spec, baseline))
        start_s = time.perf_counter() - t0
        body = {
            "prompt": prompt,
            "n_predict": max_tokens,
            "stream": True,
            "timings_per_token": True,
            "return_tokens": True,
            "cache_prompt": False,
        }
        try:
            stream = _Stream(srv, body)
        except (ServerError, OSError) as exc:
            raise SpecrtError(_DECODE_FAILED, self._failure(srv, exc)) from exc
        k = 0 if baseline or not any(t.startswith("draft-") for t in self._spec.types) else self._spec.draft_n_max
        with self._lock:
            self._gen = _Generation(stream, k)
        if self._cancelled.is_set():
            stream.interrupt()
        return {"server_restarted": started, "server_start_s": round(start_s, 3)} if started else {}

    def step(self) -> Cycle | None:
        gen = self._gen
        if gen is None:
            raise SpecrtError(-4, "no generation is running")
        try:
            cycle = gen.step()
        except (OSError, ValueError, http.client.HTTPException) as exc:  # JSONDecodeError is a ValueError
            cycle = None
            if not self._cancelled.is_set():
                self._end(gen)
                raise SpecrtError(_DECODE_FAILED, self._failure(self._servers[-1][1], exc)) from exc
        if self._cancelled.is_set():
            self._end(gen)
            raise SpecrtError(_CANCELLED, "the generation was cancelled")
        if cycle is None:
            self._end(gen)
            srv = self._servers[-1][1] if self._servers else None
            if srv is not None and not srv.running:
                raise SpecrtError(_DECODE_FAILED, self._failure(srv, None))
        return cycle

    def _end(self, gen: _Generation) -> None:
        with self._lock:
            self._gen = None
        gen.stream.close()

    def _failure(self, srv: LlamaServer, exc: BaseException | None) -> str:
        if not srv.running:
            tail = "\n".join(srv.log.splitlines()[-12:])
            return f"llama-server exited with status {srv.exit_code} during the generation:\n{tail}"
        return f"the stream from llama-server broke: {exc}"

    def time_forward(self, which: str, n_tokens: int, n_past: int = 256, reps: int = 5) -> float:
        raise SpecrtError(
            _UNSUPPORTED,
            "timing single forward passes needs SpecTune's own engine; through llama-server the cost model "
            "keeps its prior (no calibration)",
        )

    def text_tail(self) -> str:
        return ""

    def cancel(self) -> None:
        """Safe from any thread."""
        self._cancelled.set()
        with self._lock:
            gen = self._gen
        if gen is not None:
            gen.stream.interrupt()
