"""A stand-in for the Hugging Face hub on 127.0.0.1, answering the way huggingface_hub expects.

What huggingface_hub 2.x asks for a file (huggingface_hub/file_download.py, get_hf_file_metadata and
http_get):

  HEAD {endpoint}/{repo}/resolve/{revision}/{filename}
       -> 302 to the CDN, with X-Repo-Commit (40 hex), X-Linked-Etag ("<sha256>" of an LFS file),
          X-Linked-Size and Location. huggingface_hub follows redirects only within the hub's own origin,
          so the CDN here is a second server on another port, as the real one is another host.
  GET  {cdn}/{sha256}  [Range: bytes=N-]  -> 200 or 206 with Content-Range
  unknown repo: 404 + X-Error-Code: RepoNotFound; unknown file: 404 + X-Error-Code: EntryNotFound.

Faults a test can ask for, per file: ``drop_after`` (send that many bytes of the body, then close the
connection, for the next ``drop_times`` GETs), ``corrupt`` (serve bytes that differ from the advertised
sha256), ``throttle_s`` (pause between 64 KiB pieces, so a cancel lands mid-file), ``cdn_status`` (an
HTTP error from the CDN).
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

COMMIT = "0123456789abcdef0123456789abcdef01234567"
PIECE = 64 * 1024


@dataclass
class HostedFile:
    data: bytes
    sha256: str
    drop_after: int | None = None
    drop_times: int = 0
    corrupt: bool = False
    throttle_s: float = 0.0
    cdn_status: int | None = None  # the CDN answers this error instead (403: an expired signed address)


@dataclass
class Request:
    server: str  # hub | cdn
    method: str
    path: str
    range: str | None


@dataclass
class HubServer:
    files: dict[tuple[str, str], HostedFile] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    commit: str = COMMIT

    def add(self, repo: str, filename: str, data: bytes, **faults) -> HostedFile:
        hosted = HostedFile(data, hashlib.sha256(data).hexdigest(), **faults)
        self.files[(repo, filename)] = hosted
        return hosted

    def by_sha(self, sha: str) -> HostedFile | None:
        return next((f for f in self.files.values() if f.sha256 == sha), None)

    def gets(self) -> list[Request]:
        return [r for r in self.requests if r.method == "GET"]

    # -- lifetime -------------------------------------------------------------------------------
    def __enter__(self) -> HubServer:
        self._lock = threading.Lock()
        self._cdn = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, "cdn"))
        self._hub = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, "hub"))
        self._threads = [
            threading.Thread(
                target=s.serve_forever, kwargs={"poll_interval": 0.05}, name=f"hub-server-{i}", daemon=True
            )
            for i, s in enumerate((self._hub, self._cdn))
        ]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        for s in (self._hub, self._cdn):
            s.shutdown()
            s.server_close()
        for t in self._threads:
            t.join(5)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def cdn(self) -> str:
        return f"http://127.0.0.1:{self._cdn.server_address[1]}"


def _handler(hub: HubServer, role: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0 closes every connection after its answer, so no handler thread outlives a request
        protocol_version = "HTTP/1.0"

        def log_message(self, *args) -> None:
            pass

        def _record(self) -> None:
            with hub._lock:
                hub.requests.append(Request(role, self.command, self.path, self.headers.get("Range")))

        def do_HEAD(self) -> None:
            self._record()
            self._hub_resolve(body=False) if role == "hub" else self._cdn_get(body=False)

        def do_GET(self) -> None:
            self._record()
            self._hub_resolve(body=True) if role == "hub" else self._cdn_get(body=True)

        def _error(self, status: int, code: str | None) -> None:
            self.send_response(status)
            if code:
                self.send_header("X-Error-Code", code)
            self.send_header("X-Repo-Commit", hub.commit)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _hub_resolve(self, body: bool) -> None:
            # /{org}/{name}/resolve/{revision}/{filename...}
            parts = unquote(self.path.split("?", 1)[0]).lstrip("/").split("/")
            if len(parts) < 5 or parts[2] != "resolve":
                return self._error(404, None)
            repo, revision, filename = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
            if not any(r == repo for r, _ in hub.files):
                return self._error(404, "RepoNotFound")
            if revision not in ("main", hub.commit):
                return self._error(404, "RevisionNotFound")
            hosted = hub.files.get((repo, filename))
            if hosted is None:
                return self._error(404, "EntryNotFound")
            self.send_response(302)
            self.send_header("X-Repo-Commit", hub.commit)
            self.send_header("X-Linked-Etag", f'"{hosted.sha256}"')
            self.send_header("X-Linked-Size", str(len(hosted.data)))
            self.send_header("ETag", '"0000000000000000000000000000000000000000"')  # the LFS pointer's git sha
            self.send_header("Location", f"{hub.cdn}/{hosted.sha256}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _cdn_get(self, body: bool) -> None:
            hosted = hub.by_sha(self.path.lstrip("/"))
            if hosted is None:
                return self._error(404, None)
            if hosted.cdn_status is not None:
                return self._error(hosted.cdn_status, None)
            data = hosted.data
            if hosted.corrupt:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            start = 0
            rng = self.headers.get("Range")
            if rng:
                start = int(rng.removeprefix("bytes=").split("-")[0])
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(data) - start))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if not body:
                return
            end = len(data)
            drop = False
            with hub._lock:
                if hosted.drop_after is not None and hosted.drop_times > 0 and start < hosted.drop_after:
                    hosted.drop_times -= 1
                    end, drop = hosted.drop_after, True
            pos = start
            try:
                while pos < end:
                    piece = data[pos : min(pos + PIECE, end)]
                    self.wfile.write(piece)
                    self.wfile.flush()
                    pos += len(piece)
                    if hosted.throttle_s:
                        time.sleep(hosted.throttle_s)
            except (BrokenPipeError, ConnectionResetError):
                return  # the client went away (a cancel)
            if drop:
                self.close_connection = True
                self.connection.close()

    return Handler
