"""Runs a llama-server for a measurement and talks to it over HTTP.

The server is started from an argv list (never a shell), listens on 127.0.0.1
on a free port, requires a random API key, and is stopped when the block ends.
Used by the parity tests, bench/engine_vs_server.py and, later, validation.
"""

from __future__ import annotations

import collections
import json
import re
import secrets
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from engine.llama.child_process import popen_tied


class ServerError(RuntimeError):
    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        self.exit_code = exit_code  # the server's exit status when it died while starting


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TERMINATE_GRACE_S = 3.0


def _kill_if_alive(proc: subprocess.Popen, grace_s: float) -> None:
    """Give a terminated server ``grace_s`` to exit, then kill it (returns as soon as it has gone)."""
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()


class LlamaServer:
    """``with LlamaServer(argv_without_host_port) as srv: srv.complete(...)``."""

    def __init__(self, argv: list[str], startup_timeout: float = 180.0, log_lines: int = 200):
        if not argv:
            raise ServerError("empty argv")
        for flag in ("--host", "--port", "--api-key"):
            if flag in argv:
                raise ServerError(f"{flag} is chosen by the runner; leave it out of the argv")
        self.port = free_port()
        self.api_key = secrets.token_urlsafe(24)
        self.argv = list(argv) + ["--host", "127.0.0.1", "--port", str(self.port), "--api-key", self.api_key]
        self.startup_timeout = startup_timeout
        self._log: collections.deque[str] = collections.deque(maxlen=log_lines)
        self._proc: subprocess.Popen | None = None
        self._aborted = False  # terminate() was called: a start under way gives up

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> str:
        return "".join(self._log)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def exit_code(self) -> int | None:
        """The status it exited with; None while it runs, or before it started."""
        return self._proc.poll() if self._proc is not None else None

    def start(self) -> LlamaServer:
        if self._aborted:
            raise ServerError("llama-server was stopped before it started")
        if self.running:
            # a second process on the same port could not bind, yet its health check would be answered by the
            # first, which would then be left running unowned (`with LlamaServer(...)` starts it already)
            raise ServerError("this llama-server is already running")
        # tied: a SpecTune killed outright takes its server with it (engine.llama.child_process)
        self._proc = popen_tied(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._aborted:
                self.stop()
                raise ServerError("llama-server was stopped while starting")
            if self._proc.poll() is not None:
                raise ServerError(
                    f"llama-server exited with status {self._proc.returncode} while starting:\n"
                    + "\n".join(self.log.splitlines()[-15:]),
                    exit_code=self._proc.returncode,
                )
            try:
                status, _ = self._request("GET", "/health", None, timeout=2.0)
                if status == 200:
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise ServerError(f"llama-server did not become healthy within {self.startup_timeout:.0f} s")

    def _pump(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for raw in self._proc.stdout:
            self._log.append(raw.decode(errors="replace"))

    def terminate(self, grace_s: float = TERMINATE_GRACE_S) -> None:
        """Ask the server to exit now, from any thread: a start under way gives up, a request under way
        fails. stop() reaps it.

        SIGTERM alone is not enough: while it streams a response to a client that keeps reading,
        llama-server often stays up (seen here: five servers of six still running 30 s after SIGTERM, and
        a cancelled validation waiting minutes, until a second signal). What is still alive after
        ``grace_s`` is killed."""
        self._aborted = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            threading.Thread(
                target=_kill_if_alive, args=(proc, grace_s), name="llama-server-killer", daemon=True
            ).start()

    def stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            _kill_if_alive(proc, 15.0)
            proc.wait(timeout=15)
        self._proc = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _request(self, method: str, path: str, body: dict | None, timeout: float) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.api_key}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                payload = resp.read()
                return resp.status, json.loads(payload) if payload else None
        except urllib.error.HTTPError as exc:
            if exc.code == 503 and path == "/health":
                return 503, None  # still loading
            detail = exc.read().decode(errors="replace")[:500]
            raise ServerError(f"llama-server answered {exc.code} to {method} {path}: {detail}") from exc

    def props(self) -> dict:
        return self._request("GET", "/props", None, timeout=30)[1]

    def metrics(self, timeout: float = 30.0) -> dict | None:
        """The speculative-decoding counters of /metrics (parse_metrics); None when the server runs
        without --metrics (it answers 501)."""
        req = urllib.request.Request(self.base_url + "/metrics")
        req.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return parse_metrics(resp.read().decode("utf-8", errors="replace"))
        except urllib.error.HTTPError:
            return None

    def complete(
        self,
        prompt: str,
        n_predict: int,
        *,
        temperature: float | None = None,
        seed: int | None = None,
        extra: dict | None = None,
        timeout: float = 600.0,
    ) -> dict:
        """POST /completion without prompt caching; returns the response (with ``timings``).

        Sampling follows the server's own flags (--temp, --seed, ...) unless ``temperature`` or
        ``seed`` is given: a request's field overrides the flag for that request, so sending a
        default temperature would quietly make every request greedy."""
        body: dict[str, Any] = {
            "prompt": prompt,
            "n_predict": n_predict,
            "cache_prompt": False,
            "stream": False,
        }
        if temperature is not None:
            body["temperature"] = temperature
        if seed is not None:
            body["seed"] = seed
        body.update(extra or {})
        return self._request("POST", "/completion", body, timeout=timeout)[1]


def server_summary(resp: dict) -> dict:
    """The numbers of a /completion response in the lab's terms."""
    t = resp.get("timings", {})
    drafted = int(t.get("draft_n", 0))
    accepted = int(t.get("draft_n_accepted", 0))
    return {
        "tokens_generated": int(t.get("predicted_n", 0)),
        "tokens_per_s": float(t.get("predicted_per_second", 0.0)),
        "drafted": drafted,
        "accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "prompt_tokens": int(t.get("prompt_n", 0)),
        "text": resp.get("content", ""),
    }


# llama.cpp's buffer lines at load (-lv 4): "load_tensors:   CPU_Mapped model buffer size =     9.64 MiB",
# "llama_kv_cache:        CPU KV buffer size =     3.00 MiB", "sched_reserve:        CPU compute buffer size = ..."
_BUFFER_LINE = re.compile(r"\s(?P<type>\S+)\s+(?P<what>model|KV|compute) buffer size =\s*(?P<mib>[\d.]+) MiB")
_DRAFT_START = "loading draft model"


def memory_from_log(text: str) -> list[dict]:
    """The buffers llama-server's log reports at load, as the native engine's memory() gives them: one item per
    model (target, then draft after "loading draft model") and buffer type, with model, context (the KV cache)
    and compute bytes. Sizes are printed in MiB to two decimals, so each is good to about 5 KiB."""
    items: dict[tuple[str, str], dict] = {}
    model = "target"
    for line in text.splitlines():
        if _DRAFT_START in line:
            model = "draft"
            continue
        m = _BUFFER_LINE.search(line)
        if not m:
            continue
        key = (model, m["type"])
        item = items.setdefault(
            key, {"model": model, "buffer_type": m["type"], "model_bytes": 0, "context_bytes": 0, "compute_bytes": 0}
        )
        field_ = {"model": "model_bytes", "compute": "compute_bytes"}.get(m["what"], "context_bytes")
        item[field_] += round(float(m["mib"]) * 2**20)
    return list(items.values())


_METRIC_LINE = re.compile(r'^llamacpp:(\w+)(?:\{position="(\d+)"\})?\s+(\S+)$')


def parse_metrics(text: str) -> dict:
    """The spec-decode counters of llama-server's Prometheus text: spec_decode_num_drafts_total,
    ..._num_draft_tokens_total, ..._num_accepted_tokens_total, and accepted_by_position (a list: the
    tokens accepted at draft position 0, 1, ...)."""
    found: dict = {}
    by_position: dict[int, int] = {}
    for line in text.splitlines():
        m = _METRIC_LINE.match(line.strip())
        if not m or not m.group(1).startswith("spec_decode_"):
            continue
        name, position, value = m.group(1), m.group(2), float(m.group(3))
        if position is not None:
            by_position[int(position)] = int(value)
        else:
            found[name] = int(value)
    if by_position:
        found["accepted_by_position"] = [by_position.get(i, 0) for i in range(max(by_position) + 1)]
    return found
