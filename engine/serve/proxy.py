"""The thin OpenAI-compatible proxy in front of llama-server: it passes every request and answer on
unchanged, streams included, and reads what it passes (engine.serve.watch, engine.serve.record).

Why aiohttp: one well-kept library that is both the server the user's tools talk to and the client
that talks to llama-server, with streaming bodies on both sides (an answer's bytes go on as they
arrive, which a server-sent-events stream needs), a client disconnect seen as an error on the write
(so the upstream request is dropped and llama-server stops generating for nobody), and no framework
around it. It runs on an event loop in a thread of its own, so the command line and the GUI drive it
from plain threads.

The user's client sees the proxy's address and, when one was set, the user's own API key; llama-server
listens on a random 127.0.0.1 port with a key of SpecTune's (engine.llama.server), which the proxy puts
in place of the client's. Requests to the completion endpoints are watched: their answer's ``timings``
give the per-request figures. Chat requests are recorded when a recorder is given.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import threading
import time
from collections.abc import Callable

import aiohttp
from aiohttp import web

from engine.serve.record import Recorder, RecordError
from engine.serve.watch import RequestRecord, SseTimings, Watch, record_from_answer

DEFAULT_PORT = 8080
WATCHED = ("/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions", "/completion")
CHAT = ("/v1/chat/completions", "/chat/completions")
# headers that belong to one connection, not to the message (RFC 9110 section 7.6.1), and the ones the
# proxy sets itself
_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "authorization",
}


class ProxyError(OSError):
    """The proxy could not start (its port taken, an address it cannot bind)."""


def _error(status: int, message: str, kind: str) -> web.Response:
    """An error in the OpenAI shape llama-server also answers with."""
    return web.json_response({"error": {"code": status, "message": message, "type": kind}}, status=status)


class Upstream:
    """Where llama-server listens now and the key it takes; swapped when it restarts."""

    def __init__(self, url: str, key: str | None):
        self.url, self.key = url.rstrip("/"), key


class Proxy:
    def __init__(
        self,
        upstream: Upstream,
        watch: Watch,
        *,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        api_key: str | None = None,
        recorder: Recorder | None = None,
        on_request: Callable[[RequestRecord], None] | None = None,
        down_reason: Callable[[], str] = lambda: "",
    ):
        self.upstream = upstream
        self.watch = watch
        self.host, self.port = host, port
        self.api_key = api_key or None
        self.recorder = recorder
        self.on_request = on_request
        # why llama-server is not there, when it is not (the session knows: it exited, it restarts)
        self.down_reason = down_reason
        self.record_error = ""  # the last failure to write the recording, if any
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # -- running it ------------------------------------------------------------------------------

    def start(self) -> Proxy:
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(ready, failure), name="spectune-proxy", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join(timeout=5)
            exc = failure[0]
            raise ProxyError(f"the proxy cannot listen on {self.url}: {getattr(exc, 'strerror', None) or exc}")
        return self

    def _run(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(ready, failure))
        finally:
            loop.close()
            ready.set()

    async def _serve(self, ready: threading.Event, failure: list[BaseException]) -> None:
        self._stopped = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # no total timeout: an answer of thousands of tokens on a slow machine takes minutes
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10), auto_decompress=False
        )
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        try:
            await self._runner.setup()
            await web.TCPSite(self._runner, self.host, self.port).start()
            if self.port == 0:
                self.port = self._runner.addresses[0][1]
        except (OSError, OverflowError) as exc:  # OverflowError: bind() refuses a port outside 0-65535
            failure.append(exc)
            await self._close()
            return
        ready.set()
        await self._stopped.wait()
        await self._close()

    async def _close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def stop(self) -> None:
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stopped.set)
            except RuntimeError:  # the loop closed meanwhile
                pass
        if self._thread is not None:
            self._thread.join(timeout=15)

    # -- one request ------------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        if self.api_key is None:
            return True
        given = request.headers.get("Authorization", "")
        token = given[7:] if given.lower().startswith("bearer ") else request.headers.get("X-Api-Key", "")
        return hmac.compare_digest(token.encode(), self.api_key.encode())

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return _error(401, "invalid API key: send it as 'Authorization: Bearer KEY'", "authentication_error")
        body = await request.read()
        watched = request.method == "POST" and request.path in WATCHED
        parsed = _json(body) if watched else None
        if not watched:
            return await self._forward(request, body, None)
        rid, started, t0 = self.watch.begin(), time.time(), time.monotonic()
        stream = bool(isinstance(parsed, dict) and parsed.get("stream"))
        fields = {"path": request.path, "started": started, "stream": stream}
        outcome: dict = {"status": 502, "error": "no answer"}
        try:
            if self.recorder is not None and request.path in CHAT and parsed is not None:
                await self._record(parsed)
            return await self._forward(request, body, outcome)
        finally:
            rec = self.watch.end(rid, seconds=time.monotonic() - t0, **fields, **outcome)
            if self.on_request is not None:
                self.on_request(rec)

    async def _record(self, parsed: object) -> None:
        """The request into the recording (a disk write: off the event loop); a recording that cannot be
        written is said in ``record_error`` and the request goes on: the user's tools come first."""
        assert self.recorder is not None
        record = functools.partial(self.recorder.record, parsed, self.watch.in_flight)
        try:
            await asyncio.get_running_loop().run_in_executor(None, record)
        except RecordError as exc:
            self.record_error = str(exc)

    async def _forward(self, request: web.Request, body: bytes, outcome: dict | None) -> web.StreamResponse:
        """Pass the request on and its answer back; outcome (watched requests): filled with the answer's
        status, figures and error."""
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        if self.upstream.key:
            headers["Authorization"] = f"Bearer {self.upstream.key}"
        try:
            upstream = await self._session.request(
                request.method, self.upstream.url + request.path_qs, data=body or None, headers=headers
            )
        except (aiohttp.ClientError, OSError) as exc:
            reason = self.down_reason() or f"llama-server is not answering ({exc.__class__.__name__})"
            if outcome is not None:
                outcome.update(status=503, error=reason)
            return _error(503, reason, "unavailable_error")
        async with upstream:
            resp = web.StreamResponse(
                status=upstream.status,
                reason=upstream.reason,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in _HOP},
            )
            await resp.prepare(request)
            sse = SseTimings() if upstream.content_type == "text/event-stream" else None
            whole = bytearray()
            try:
                async for chunk in upstream.content.iter_any():
                    await resp.write(chunk)
                    if outcome is not None:
                        sse.feed(chunk) if sse is not None else whole.extend(chunk)
                await resp.write_eof()
            except (ConnectionResetError, aiohttp.ClientConnectionResetError):
                # the client went away mid-answer: drop the upstream request, so llama-server stops for nobody
                upstream.close()
                if outcome is not None:
                    outcome.update(status=upstream.status, error="the client disconnected mid-answer")
                return resp
            except aiohttp.ClientPayloadError:
                if outcome is not None:
                    reason = self.down_reason() or "llama-server broke off its answer"
                    outcome.update(status=upstream.status, error=reason)
                return resp
        if outcome is not None:
            outcome.update(_outcome(upstream.status, sse, bytes(whole)))
        return resp


def _json(body: bytes) -> object:
    try:
        return json.loads(body)
    except ValueError:
        return None  # llama-server answers it with its own error


def _outcome(status: int, sse: SseTimings | None, whole: bytes) -> dict:
    if sse is not None:
        sse.close()
        answer, error = sse.last, sse.error
    else:
        parsed = _json(whole)
        answer = parsed if isinstance(parsed, dict) else None
        err = answer.get("error") if answer else None
        error = str(err.get("message", "")) if isinstance(err, dict) else ""
    if status != 200 and not error:
        error = f"llama-server answered {status}"
    return {"status": status, "error": error, **record_from_answer(answer)}
