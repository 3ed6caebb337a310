"""One serving session: llama-server started with the tuned settings, the proxy in front of it, the
watch and the optional recording, and llama-server's death noticed and offered a restart.

llama-server runs the argv the export writes (engine.deploy.export), from the bundled binary or
the user's, on a random 127.0.0.1 port with a key of its own (engine.llama.server); the user's
tools talk to the proxy only. A llama-server that exits while serving is reported through
``on_event`` with its log's tail; the proxy then answers 503 with that reason, and ``restart``
starts it again on the same settings, the proxy, the watch and the recording carrying on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.core.settings import LoadSettings, SamplingSettings, SettingsError, SpecSettings
from engine.deploy.export import export_llama_server
from engine.llama.server import LlamaServer, ServerError
from engine.serve.proxy import DEFAULT_PORT, Proxy, Upstream
from engine.serve.record import Recorder
from engine.serve.watch import RequestRecord, ServerCounters, Watch

POLL_S = 0.5  # how often the session looks whether llama-server is still alive
METRICS_S = 5.0  # how often it reads llama-server's /metrics into the watch


@dataclass
class ServeSettings:
    load: LoadSettings
    spec: SpecSettings
    sampling: SamplingSettings | None = None
    server: Path | None = None  # a llama-server binary; None: the bundled one
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = None  # what the user's clients must send; None: none
    record: Path | None = None  # a JSONL file to append each chat request to
    parallel: int = 1  # server slots (-np), each with load.ctx of context
    metrics: bool = True  # llama-server's /metrics, passed through like any path
    startup_timeout: float = 300.0
    extra: list[str] = field(default_factory=list)


class ServeSession:
    """``start()``, then requests on ``base_url``; ``stop()`` at the end. Events (dicts, from a
    background thread): {"kind": "server-exited", "code", "log"}, {"kind": "restarted"}."""

    def __init__(
        self,
        settings: ServeSettings,
        on_request: Callable[[RequestRecord], None] | None = None,
        on_event: Callable[[dict], None] | None = None,
    ):
        if not 0 <= settings.port <= 65535:  # said before llama-server starts, not after
            raise SettingsError(f"the port must be between 1 and 65535 (0: any free one), got {settings.port}")
        self.settings = settings
        self.on_event = on_event or (lambda ev: None)
        self.watch = Watch()
        self.recorder = Recorder(settings.record) if settings.record is not None else None
        self.server: LlamaServer | None = None
        self.export = export_llama_server(
            settings.load, settings.spec, settings.sampling, settings.server, parallel=settings.parallel
        )
        self._down = "llama-server is starting"
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._aborted = threading.Event()  # abort(): a start under way gives up
        self.proxy = Proxy(
            Upstream("http://127.0.0.1:9", None),  # nothing listens until llama-server is up
            self.watch,
            host=settings.host,
            port=settings.port,
            api_key=settings.api_key,
            recorder=self.recorder,
            on_request=on_request,
            down_reason=lambda: self._down,
        )
        self._monitor: threading.Thread | None = None

    @property
    def argv(self) -> list[str]:
        """llama-server's argv as run (the runner adds its address and key)."""
        extra = ["--metrics"] if self.settings.metrics and "--metrics" not in self.export.argv else []
        return self.export.argv + extra + list(self.settings.extra)

    @property
    def base_url(self) -> str:
        """What an IDE or a chat client is given: the OpenAI-compatible base URL."""
        return self.proxy.url + "/v1"

    @property
    def server_log(self) -> str:
        return self.server.log if self.server is not None else ""

    def start(self) -> ServeSession:
        """The proxy first (a taken port fails at once, before a model loads), then llama-server."""
        self.proxy.start()
        try:
            self._start_server()
        except BaseException:
            self.proxy.stop()
            raise
        self._monitor = threading.Thread(target=self._watch_server, name="spectune-serve-monitor", daemon=True)
        self._monitor.start()
        return self

    def _start_server(self) -> None:
        server = LlamaServer(self.argv, startup_timeout=self.settings.startup_timeout)
        with self._lock:
            self.server = server
        if self._aborted.is_set():
            server.terminate()  # its start() then raises at once
        self._down = "llama-server is starting"
        server.start()
        self.proxy.upstream = Upstream(server.base_url, server.api_key)
        self._down = ""

    def _watch_server(self) -> None:
        reported: LlamaServer | None = None
        metrics_due = time.monotonic()
        while not self._stopping.wait(POLL_S):
            with self._lock:
                server = self.server
            if server is not None and server.running and not self._down and time.monotonic() >= metrics_due:
                metrics_due = time.monotonic() + METRICS_S
                self._read_counters(server)
            code = server.exit_code if server is not None else None
            if server is None or code is None or server is reported:
                continue
            reported = server
            self._down = f"llama-server exited with status {code}; restart it to serve again"
            tail = "\n".join(server.log.splitlines()[-15:])
            self.on_event({"kind": "server-exited", "code": code, "log": tail})

    def _read_counters(self, server: LlamaServer) -> None:
        try:
            metrics = server.metrics(timeout=2.0)
        except (OSError, ValueError):  # busy or going down: the next read will tell
            return
        if metrics is not None:
            self.watch.counters = ServerCounters.from_metrics(metrics)

    def abort(self) -> None:
        """From any thread: a start under way gives up (it raises ServerError), and none begins after."""
        self._aborted.set()
        with self._lock:
            server = self.server
        if server is not None:
            server.terminate()

    @property
    def server_alive(self) -> bool:
        server = self.server
        return server is not None and server.running

    def restart(self) -> None:
        """llama-server again on the same settings; the proxy, the watch and the recording carry on."""
        with self._lock:
            old = self.server
        if old is not None:
            old.stop()
        self._start_server()
        self.on_event({"kind": "restarted", "url": self.base_url})

    def stop(self) -> None:
        self._stopping.set()
        self.proxy.stop()
        with self._lock:
            server, self.server = self.server, None
        if server is not None:
            server.stop()
        if self.recorder is not None:
            self.recorder.close()
        if self._monitor is not None:
            self._monitor.join(timeout=5)

    def __enter__(self) -> ServeSession:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def wait_for_requests(session: ServeSession, count: int, timeout: float) -> bool:
    """True once the watch holds ``count`` requests (tests and benches)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if session.watch.total >= count:
            return True
        time.sleep(0.05)
    return False


__all__ = ["ServeSession", "ServeSettings", "ServerError"]
