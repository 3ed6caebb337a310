"""``spectune serve``: the tuned settings served behind SpecTune's proxy, each request watched.

  spectune serve (--demo | --target T.gguf [--draft D.gguf]) [knobs of run] [--port 8080] [--host H]
                 [--api-key KEY] [--record FILE] [--parallel N] [--server BIN] [--json] [--tuned-acceptance A]

It prints the base URL to give an IDE or a chat client, then one line per request (JSON lines with
--json) until Ctrl-C. A llama-server that dies is reported and started again once; a second death in
a row ends the command.
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
from pathlib import Path

from engine.cli.args import add_knob_args, add_model_args, settings_from
from engine.cli.errors import guarded

RESTARTS = 1  # a server that dies again right after a restart is not restarted a second time


def _error_types() -> tuple[type[BaseException], ...]:
    from engine.llama.install import LlamaInstallError
    from engine.llama.server import ServerError
    from engine.runtime.client import EngineError

    return (ValueError, OSError, EngineError, LlamaInstallError, ServerError)


@guarded(lazy=_error_types)
def cmd_serve(a: argparse.Namespace) -> int:
    from engine.serve.session import ServeSession, ServeSettings
    from engine.serve.watch import acceptance_alert

    load, spec, sampling = settings_from(a, export=True)
    settings = ServeSettings(
        load,
        spec,
        sampling,
        server=a.server,
        host=a.host,
        port=a.port,
        api_key=a.api_key or os.environ.get("SPECTUNE_API_KEY") or None,
        record=a.record,
        parallel=a.parallel,
    )
    events: queue.Queue = queue.Queue()
    session = ServeSession(
        settings, on_request=lambda r: events.put(("request", r)), on_event=lambda e: events.put(("event", e))
    )
    for w in session.export.warnings:
        if "server slot" not in w:  # serving many clients is what --parallel is for
            print(f"spectune: warning: {w}", file=sys.stderr)
    if settings.host not in ("127.0.0.1", "localhost", "::1") and not settings.api_key:
        print(
            f"spectune: warning: --host {settings.host} lets other machines use the server, and no --api-key is "
            "set: anyone who reaches this port can use it",
            file=sys.stderr,
        )
    print(f"spectune: starting llama-server: {' '.join(session.argv)}", file=sys.stderr)
    with session:
        print(f"serving on {session.base_url}  (OpenAI-compatible; give this base URL to your IDE or chat client)")
        if settings.api_key:
            print("clients must send 'Authorization: Bearer <your key>'")
        if session.recorder is not None:
            print(f"recording chat requests to {session.recorder.path}")
        sys.stdout.flush()
        return _serve_loop(session, events, a.json, a.tuned_acceptance, acceptance_alert)


def _serve_loop(session, events: queue.Queue, as_json: bool, tuned: float | None, alert) -> int:
    restarts, alerted = 0, ""
    while True:
        try:
            kind, item = events.get(timeout=1.0)
        except queue.Empty:
            continue
        except KeyboardInterrupt:
            counters = session.watch.counters.line() if session.watch.counters is not None else ""
            if counters:  # how far into a draft acceptance reached: a longer or a shorter draft?
                print(f"spectune: {counters}", file=sys.stderr, flush=True)
            return 0
        if kind == "request":
            print(item.json() if as_json else item.line(), flush=True)
            restarts = 0  # a request served: the server is healthy again
            line = alert(session.watch.rolling(), tuned)
            if line and line != alerted:
                print(f"spectune: note: {line}", file=sys.stderr, flush=True)
            alerted = line
        elif item["kind"] == "server-exited":
            print(f"spectune: llama-server exited with status {item['code']}:\n{item['log']}", file=sys.stderr)
            if restarts >= RESTARTS:
                print("spectune: error: llama-server died again after a restart; stopping", file=sys.stderr)
                return 2
            restarts += 1
            print("spectune: restarting llama-server", file=sys.stderr, flush=True)
            session.restart()
        elif item["kind"] == "restarted":
            print(f"serving again on {item['url']}", flush=True)


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("serve", help="serve the settings behind SpecTune's proxy and watch each request")
    add_model_args(s)
    add_knob_args(s)
    s.add_argument("--host", default="127.0.0.1", help="the proxy's address (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=8080, help="the proxy's port (default 8080)")
    s.add_argument(
        "--api-key",
        default=None,
        help="a key the clients must send (default: none; also read from SPECTUNE_API_KEY)",
    )
    s.add_argument("--record", type=Path, help="append every chat request to this JSONL file (a workload set)")
    s.add_argument("--parallel", type=int, default=1, metavar="N", help="server slots (-np), each with --ctx")
    s.add_argument("--server", type=Path, help="a llama-server binary (default: the bundled one)")
    s.add_argument(
        "--tuned-acceptance",
        type=float,
        default=None,
        metavar="A",
        help="the acceptance the tune measured: a note when the traffic's falls well below it",
    )
    s.add_argument("--json", action="store_true", help="one JSON object per request")
    s.set_defaults(func=cmd_serve)
