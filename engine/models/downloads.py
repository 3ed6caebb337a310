"""Downloading GGUF files from the Hugging Face hub: progress, resume, sha256, free-disk check, cancel.

    pull("bartowski/Qwen2.5-0.5B-Instruct-GGUF:Qwen2.5-0.5B-Instruct-Q8_0.gguf")
    pull("qwen2.5-7b+0.5b")            # a preset from the catalog: its target and draft

The hub is asked through huggingface_hub's own pieces: ``get_hf_file_metadata``
(a HEAD on ``/{repo}/resolve/{revision}/{filename}``, which answers the commit
in X-Repo-Commit, the sha256 of an LFS file in X-Linked-Etag, its size in
X-Linked-Size and the CDN address in Location) and ``http_stream_backoff`` for
the GET. The bytes are streamed here rather than through ``hf_hub_download``
because, as of huggingface_hub 2.x, that function writes each download to a
per-process temporary file and deletes it on any failure: an interrupted or
cancelled 20 GB download would start again from zero. Here the partial file has
a stable name (the blob's etag), so a dropped connection, a cancel or a killed
process all resume with a Range request where they stopped.

Files land where hf_hub_download would put them (blobs/<sha256>, a snapshots/
<commit>/<filename> link, refs/<revision>), so huggingface_hub, llama.cpp's -hf
and the local library find them; or in a plain folder with ``local_dir``.

A file is used only after its sha256 matches: the catalog's when it names one,
otherwise the hub's LFS etag. A mismatch deletes the download and raises
ChecksumError; a cached blob that fails the check is deleted and fetched again.

From a GUI, run ``pull`` in a worker thread with ``on_progress`` (called in that
thread with a Progress: bytes, total, rate, ETA; forward it as a signal) and
``cancel`` (a threading.Event set from the GUI thread; the download stops at the
next chunk with DownloadCancelled and keeps its partial file).

Written against huggingface_hub 2.4 (httpx2 underneath).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from engine.core.units import format_bytes

CHUNK_BYTES = 1 << 20
RETRIES = 5  # attempts after a dropped connection, counted from the last byte received
RETRY_WAIT_S = 1.0
PROGRESS_INTERVAL_S = 0.2  # the callback's rate limit (a GUI redraws at this pace at most)
RATE_WINDOW_S = 5.0  # the rate is measured over this sliding window
HASH_CHUNK_BYTES = 8 << 20

_SHA256 = re.compile(r"[0-9a-f]{64}")
_REPO_FILE = re.compile(r"(?P<repo>[\w.-]+/[\w.-]+):(?P<filename>[^:]+\.gguf)", re.IGNORECASE)

DiskFree = Callable[[Path], int]


class DownloadError(RuntimeError):
    """A download failed; the message says why and what to do."""


class DiskSpaceError(DownloadError):
    def __init__(self, directory: Path, needed_bytes: int, free_bytes: int):
        self.directory, self.needed_bytes, self.free_bytes = directory, needed_bytes, free_bytes
        super().__init__(
            f"not enough free disk space in {directory}: the download needs {needed_bytes} bytes "
            f"({format_bytes(needed_bytes)}) but only {free_bytes} bytes ({format_bytes(free_bytes)}) "
            "are free"
        )


class ChecksumError(DownloadError):
    """The bytes are not the file the hub or the catalog names; they were deleted (or, in a user's folder, left
    untouched and refused)."""


class DownloadCancelled(DownloadError):
    def __init__(self, filename: str, partial: Path, kept_bytes: int, total_bytes: int | None):
        self.partial, self.kept_bytes = partial, kept_bytes
        of = f" of {total_bytes}" if total_bytes is not None else ""
        super().__init__(
            f"download of {filename} cancelled: {kept_bytes}{of} bytes kept in {partial}; pull again to resume"
        )


@dataclass(frozen=True)
class FileRequest:
    """One file to fetch. sha256 / size_bytes come from the catalog when it knows them."""

    repo: str
    filename: str
    revision: str = "main"
    sha256: str | None = None
    size_bytes: int | None = None
    role: str = "model"  # model | target | draft
    bundled_path: str | None = None  # shipped with SpecTune (resources/models): checked, never fetched


@dataclass(frozen=True)
class Progress:
    """What the callback gets: one file's state. rate and eta are None until they can be measured."""

    role: str
    filename: str
    stage: str  # downloading | verifying | done
    done_bytes: int
    total_bytes: int | None
    rate_bytes_per_s: float | None
    eta_s: float | None
    file_index: int  # 0-based, of file_count in this pull
    file_count: int

    @property
    def fraction(self) -> float | None:
        return self.done_bytes / self.total_bytes if self.total_bytes else None


@dataclass
class DownloadResult:
    role: str
    repo: str
    filename: str
    revision: str
    commit: str | None
    path: str
    size_bytes: int
    sha256: str | None  # the hash the file was checked against (None: the hub gave none)
    sha256_source: str | None  # catalog | hub
    sha256_verified: bool
    downloaded_bytes: int  # received in this call
    resumed_from: int  # bytes already on disk when this call started
    already_present: bool
    replaced_corrupt: bool = False  # a cached copy failed its sha256 check and was fetched again
    gguf_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def how(self) -> str:
        """ "downloaded, resumed from byte N; sha256 checked against the hub", for the user."""
        if self.already_present:
            how = "already here"
        else:
            how = f"downloaded, resumed from byte {self.resumed_from}" if self.resumed_from else "downloaded"
        check = f"sha256 checked against the {self.sha256_source}" if self.sha256_verified else "no sha256 to check"
        return f"{how}; {check}"


@dataclass
class PullResult:
    name: str
    preset: str | None
    files: list[DownloadResult]
    compat: dict | None = None  # engine.models.compat's verdict for a preset's pair

    def path(self, role: str) -> str | None:
        return next((f.path for f in self.files if f.role == role), None)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "preset": self.preset, "files": [f.to_dict() for f in self.files]}
        for role in ("target", "draft", "model"):
            if (p := self.path(role)) is not None:
                d[role] = p
        if self.compat is not None:
            d["compat"] = self.compat
        return d


# -- what to fetch ---------------------------------------------------------------------------


def parse_repo_file(name: str) -> FileRequest | None:
    """'owner/repo:file.gguf' (optionally 'owner/repo@revision:file.gguf') -> FileRequest; else None."""
    revision = "main"
    repo_part, sep, filename = name.partition(":")
    if not sep:
        return None
    if "@" in repo_part:
        repo_part, revision = repo_part.split("@", 1)
    if not _REPO_FILE.fullmatch(f"{repo_part}:{filename}") or not revision:
        return None
    return FileRequest(repo_part, filename, revision)


def preset_requests(preset: Any) -> list[FileRequest]:
    """A catalog Preset (engine.models.catalog) -> its target and draft as FileRequests."""
    requests = []
    for role in ("target", "draft"):
        mf = getattr(preset, role)
        bundled = getattr(mf, "bundled_path", None)
        requests.append(
            FileRequest(
                repo=mf.repo,
                filename=mf.filename,
                sha256=_norm_sha(mf.sha256),
                size_bytes=mf.size_bytes,
                role=role,
                bundled_path=str(bundled) if bundled is not None else None,
            )
        )
    return requests


def resolve_name(name: str, catalog: Any = None) -> tuple[str | None, list[FileRequest]]:
    """NAME -> (preset name or None, files). REPO:FILENAME is taken as is; anything else is a preset name.

    catalog: an engine.models.catalog.Catalog (loaded here when None). Unknown presets raise the catalog's
    CatalogError, which lists the known names.
    """
    direct = parse_repo_file(name)
    if direct is not None:
        return None, [direct]
    if ":" in name or name.count("/") == 1:
        raise DownloadError(
            f"{name!r} is neither a preset name nor REPO:FILENAME "
            "(for example bartowski/Qwen2.5-0.5B-Instruct-GGUF:Qwen2.5-0.5B-Instruct-Q8_0.gguf)"
        )
    if catalog is None:
        try:
            from engine.models.catalog import load_catalog
        except ImportError:
            raise DownloadError(
                f"{name!r} is not REPO:FILENAME, and presets need the catalog "
                "(engine/models/catalog.py), which is not installed"
            ) from None
        catalog = load_catalog()
    return name, preset_requests(catalog.preset(name))


def _norm_sha(sha: str | None) -> str | None:
    return sha.strip().lower() if sha else None


# -- where it goes ---------------------------------------------------------------------------


def hub_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """HF_HUB_CACHE, else HF_HOME/hub, else huggingface_hub's default; read now, not at import."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if env:
        return Path(env).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _endpoint(endpoint: str | None) -> str:
    if endpoint:
        return endpoint.rstrip("/")
    from huggingface_hub import constants

    # HF_ENDPOINT is read now: huggingface_hub reads it once at import
    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


@dataclass
class _Remote:
    """The HEAD's answer."""

    url: str  # /resolve/ address
    location: str  # where the bytes are (the CDN after a redirect)
    commit: str
    etag: str
    size: int | None


@dataclass
class _Plan:
    request: FileRequest
    remote: _Remote | None
    final: Path  # the file the caller gets (a snapshot link in the cache)
    blob: Path  # the bytes (== final in a local folder)
    partial: Path
    lock: Path
    expected_sha: str | None
    sha_source: str | None
    in_cache: bool
    present: bool = False
    replaced_corrupt: bool = False
    resumed_from: int = 0
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> int | None:
        if self.remote is not None and self.remote.size is not None:
            return self.remote.size
        return self.request.size_bytes


def _remote_metadata(req: FileRequest, endpoint: str, headers: dict[str, str]) -> _Remote:
    import httpx2
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    url = hf_hub_url(req.repo, req.filename, revision=req.revision, endpoint=endpoint)
    where = f"{req.repo}:{req.filename}"
    try:
        # no retries: an unreachable hub is said at once, as hf_hub_download's first attempt does
        meta = get_hf_file_metadata(url, headers=headers, endpoint=endpoint, retry_on_errors=False)
    except GatedRepoError:
        raise DownloadError(f"{req.repo} is gated: accept its terms on the hub and log in (hf auth login)") from None
    except RepositoryNotFoundError:
        raise DownloadError(
            f"repository {req.repo} not found on {endpoint} (or it is private: log in with hf auth login)"
        ) from None
    except RevisionNotFoundError:
        raise DownloadError(f"repository {req.repo} has no revision {req.revision!r}") from None
    except RemoteEntryNotFoundError:
        raise DownloadError(f"repository {req.repo} has no file {req.filename!r} at revision {req.revision}") from None
    except OfflineModeIsEnabled:
        raise DownloadError(f"cannot fetch {where}: huggingface_hub's offline mode (HF_HUB_OFFLINE) is on") from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise DownloadError(f"the hub answered HTTP {status} for {where}") from None
    except httpx2.TransportError as exc:
        raise DownloadError(f"cannot reach the hub at {endpoint} for {where}: {exc or type(exc).__name__}") from None
    if not meta.commit_hash or not meta.etag:
        raise DownloadError(
            f"{endpoint} did not answer like the Hugging Face hub for {where} "
            "(no X-Repo-Commit or ETag header): check HF_ENDPOINT and any proxy"
        )
    return _Remote(url, meta.location or url, meta.commit_hash, meta.etag, meta.size)


def _plan(
    req: FileRequest, remote: _Remote | None, cache: Path, local_dir: Path | None, headers: dict[str, str]
) -> _Plan:
    hub_sha = remote.etag.lower() if remote is not None and _SHA256.fullmatch(remote.etag.lower()) else None
    if req.sha256 and hub_sha and req.sha256 != hub_sha:
        raise ChecksumError(
            f"the hub's {req.repo}:{req.filename} is not the file the catalog names "
            f"(hub sha256 {hub_sha}, catalog {req.sha256}): the file changed upstream and the "
            "catalog needs updating; nothing was downloaded"
        )
    if req.sha256:
        expected, source = req.sha256, "catalog"
    elif hub_sha:
        expected, source = hub_sha, "hub"
    else:
        expected, source = None, None
    tag = (remote.etag if remote is not None else expected) or "unknown"
    if local_dir is None:
        from huggingface_hub.file_download import repo_folder_name

        folder = repo_folder_name(repo_id=req.repo, repo_type="model")
        storage = cache / folder
        blob = storage / "blobs" / tag
        commit = remote.commit if remote is not None else req.revision
        final = storage / "snapshots" / commit / Path(*req.filename.split("/"))
        partial = blob.with_name(blob.name + ".incomplete")
        # the same lock hf_hub_download takes, so the two never write one blob at once
        lock = cache / ".locks" / folder / f"{tag}.lock"
        in_cache = True
    else:
        final = blob = local_dir / Path(*req.filename.split("/"))
        work = local_dir / ".cache" / "spectune"
        partial = work / f"{req.filename.replace('/', '_')}.{tag[:16]}.incomplete"
        lock = work / f"{req.filename.replace('/', '_')}.lock"
        in_cache = False
    if remote is not None and urlparse(remote.location).netloc != urlparse(remote.url).netloc:
        # a signed CDN address: the hub token must not travel there (huggingface_hub does the same)
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
    return _Plan(req, remote, final, blob, partial, lock, expected, source, in_cache, headers=headers)


# -- progress --------------------------------------------------------------------------------


class _Meter:
    """Turns byte counts into rate-limited Progress callbacks with a sliding-window rate."""

    def __init__(
        self,
        on_progress: Callable[[Progress], None] | None,
        req: FileRequest,
        total: int | None,
        index: int,
        count: int,
        interval_s: float = PROGRESS_INTERVAL_S,
    ):
        self.on_progress, self.req, self.total = on_progress, req, total
        self.index, self.count, self.interval_s = index, count, interval_s
        self.samples: deque[tuple[float, int]] = deque()
        self.last_emit = 0.0

    def update(self, done: int, stage: str = "downloading", force: bool = False) -> None:
        now = time.monotonic()
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[0][0] > RATE_WINDOW_S:
            self.samples.popleft()
        if self.on_progress is None or (not force and now - self.last_emit < self.interval_s):
            return
        self.last_emit = now
        rate = eta = None
        t0, b0 = self.samples[0]
        if now - t0 > 0.05 and done > b0:
            rate = (done - b0) / (now - t0)
            if self.total is not None:
                eta = max(self.total - done, 0) / rate
        self.on_progress(
            Progress(self.req.role, self.req.filename, stage, done, self.total, rate, eta, self.index, self.count)
        )

    def restart(self) -> None:
        """A new phase (hashing after downloading): its rate starts afresh."""
        self.samples.clear()


# -- the transfer ----------------------------------------------------------------------------


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _sha256(path: Path, meter: _Meter | None, cancel: threading.Event | None) -> str:
    h = hashlib.sha256()
    done = 0
    if meter is not None:
        meter.restart()
    with open(path, "rb") as fh:
        while chunk := fh.read(HASH_CHUNK_BYTES):
            h.update(chunk)
            done += len(chunk)
            if meter is not None:
                meter.update(done, "verifying")
            if cancel is not None and cancel.is_set():
                size = path.stat().st_size
                raise DownloadCancelled(path.name, path, size, size)
    return h.hexdigest()


def _transfer(
    plan: _Plan, meter: _Meter, cancel: threading.Event | None, chunk_bytes: int, retries: int, retry_wait_s: float
) -> int:
    """Append the missing bytes to plan.partial; resumes with Range after a dropped connection.

    Returns the bytes received. The partial file is left in place on every failure, so the next call
    resumes it.
    """
    import httpx2

    assert plan.remote is not None
    name, total = plan.request.filename, plan.total
    plan.partial.parent.mkdir(parents=True, exist_ok=True)
    stream = _Stream()
    attempts_left = retries
    while True:
        stream.have = _size(plan.partial)
        if total is not None and stream.have > total:
            plan.partial.unlink()  # longer than the file: not a prefix of it
            stream.have = 0
        if total is not None and stream.have == total:
            return stream.received
        stream.got_bytes = False
        try:
            if not _stream_rest(plan, meter, cancel, chunk_bytes, stream):
                continue  # the partial was removed: start again
            if total is None or stream.have == total:
                return stream.received
            error: Exception = DownloadError(f"the connection ended after {stream.have} of {total} bytes")
        except httpx2.TransportError as exc:
            error = exc
        if stream.got_bytes:
            attempts_left = retries  # progress was made: the count of failures starts again
        if attempts_left <= 0:
            of = f" of {total}" if total is not None else ""
            raise DownloadError(
                f"download of {name} interrupted ({error or type(error).__name__}): "
                f"{_size(plan.partial)}{of} bytes kept in {plan.partial}; pull again to resume"
            )
        attempts_left -= 1
        if cancel is not None and cancel.wait(retry_wait_s):
            raise DownloadCancelled(name, plan.partial, _size(plan.partial), total)
        if cancel is None:
            time.sleep(retry_wait_s)


@dataclass
class _Stream:
    """A transfer's progress over its attempts."""

    received: int = 0  # bytes received, all attempts together
    have: int = 0  # bytes of the file in the partial
    got_bytes: bool = False  # the attempt under way received some


def _stream_rest(plan: _Plan, meter: _Meter, cancel: threading.Event | None, chunk_bytes: int, stream: _Stream) -> bool:
    """One GET of the file from byte stream.have on, appended to the partial as it arrives. False when the
    server cannot continue the partial, which is then removed."""
    from huggingface_hub import constants
    from huggingface_hub.utils import http_stream_backoff

    assert plan.remote is not None
    name, total = plan.request.filename, plan.total
    headers = dict(plan.headers)
    if stream.have:
        headers["Range"] = f"bytes={stream.have}-"
    with http_stream_backoff(
        "GET",
        plan.remote.location,
        headers=headers,
        follow_redirects=True,
        timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT,
        retry_on_exceptions=(),
        retry_on_status_codes=(429, 500, 502, 503, 504),
    ) as response:
        if response.status_code == 416 and stream.have:
            plan.partial.unlink()  # the server cannot continue this partial: start again
            return False
        mode = _append_mode(plan, response, stream.have)
        if mode == "wb":
            stream.have = 0  # the server ignored the Range header and sends the whole file
        meter.update(stream.have, force=True)
        with open(plan.partial, mode) as fh:
            for chunk in response.iter_bytes(chunk_bytes):
                fh.write(chunk)
                stream.have += len(chunk)
                stream.received += len(chunk)
                stream.got_bytes = True
                meter.update(stream.have)
                if cancel is not None and cancel.is_set():
                    fh.flush()
                    raise DownloadCancelled(name, plan.partial, stream.have, total)
    return True


def _append_mode(plan: _Plan, response: Any, have: int) -> str:
    """How the answer to a GET from byte ``have`` goes into the partial: "ab" where it continues it, "wb" where
    the server sends the whole file; a DownloadError for an error status or a range that does not fit."""
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import hf_raise_for_status

    name = plan.request.filename
    try:
        hf_raise_for_status(response)
    except HfHubHTTPError:
        # e.g. an expired signed CDN address; the next pull asks the hub for a fresh one
        raise DownloadError(
            f"the download server answered HTTP {response.status_code} for {name}; "
            f"{have} bytes kept in {plan.partial}, pull again to resume"
        ) from None
    if have and response.status_code != 206:
        return "wb"
    if have and not response.headers.get("Content-Range", "").startswith(f"bytes {have}-"):
        raise DownloadError(
            f"the server answered {name}'s range request from byte {have} with "
            f"{response.headers.get('Content-Range')!r}"
        )
    return "ab"


def _link_into_snapshot(plan: _Plan) -> None:
    """snapshots/<commit>/<filename> -> ../../blobs/<etag> (relative, as huggingface_hub makes them); where
    symlinks are not allowed (Windows without developer mode) the blob is copied, as huggingface_hub does."""
    plan.final.parent.mkdir(parents=True, exist_ok=True)
    if plan.final.is_symlink() or plan.final.exists():
        plan.final.unlink()
    try:
        os.symlink(os.path.relpath(plan.blob, plan.final.parent), plan.final)
    except OSError:
        shutil.copyfile(plan.blob, plan.final)
    ref = plan.blob.parent.parent / "refs" / plan.request.revision
    if plan.remote is not None and plan.request.revision != plan.remote.commit:
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(plan.remote.commit)


def _check_existing(plan: _Plan, meter: _Meter, cancel: threading.Event | None) -> None:
    """Sets plan.present when the file is already there and whole; a cached blob that is not whole is deleted."""
    target = plan.blob
    if not target.is_file():
        return
    size = target.stat().st_size
    problem = None
    if plan.total is not None and size != plan.total:
        problem = f"is {size} bytes, not {plan.total}"
    elif plan.expected_sha is not None:
        actual = _sha256(target, meter, cancel)
        if actual != plan.expected_sha:
            problem = f"has sha256 {actual}, not {plan.expected_sha}"
    if problem is None:
        plan.present = True
        return
    if not plan.in_cache:
        # a user's own folder: never delete a file we did not write
        raise ChecksumError(f"{target} already exists but {problem}: move it away or delete it, then pull again")
    target.unlink()
    if plan.final.is_symlink() or plan.final.exists():
        plan.final.unlink()
    plan.replaced_corrupt = True


def _disk_check(plans: Iterable[_Plan], disk_free: DiskFree) -> None:
    """All the bytes still to come, per file system, against its free space; before any byte is fetched."""
    needed: dict[int, tuple[Path, int]] = {}
    for plan in plans:
        if plan.present or plan.total is None:
            continue
        missing = plan.total - min(_size(plan.partial), plan.total)
        where = plan.partial.parent
        existing = next(p for p in (where, *where.parents) if p.exists())
        device = existing.stat().st_dev
        directory, total = needed.get(device, (existing, 0))
        needed[device] = (directory, total + missing)
    for directory, missing in needed.values():
        free = disk_free(directory)
        if missing > free:
            raise DiskSpaceError(directory, missing, free)


def default_disk_free(path: Path) -> int:
    return shutil.disk_usage(path).free


def download_files(
    requests: list[FileRequest],
    *,
    cache_dir: str | Path | None = None,
    local_dir: str | Path | None = None,
    endpoint: str | None = None,
    token: str | bool | None = None,
    cancel: threading.Event | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    disk_free: DiskFree = default_disk_free,
    chunk_bytes: int = CHUNK_BYTES,
    retries: int = RETRIES,
    retry_wait_s: float = RETRY_WAIT_S,
) -> list[DownloadResult]:
    """Fetch every file (or find it already there), verified; in the HF cache unless local_dir is given.

    Every HEAD and the free-disk check happen before the first byte is fetched, so a pair that does not
    fit fails at once. on_progress is called from this thread, at most every PROGRESS_INTERVAL_S per stage.
    cancel, when set, stops at the next chunk and keeps the partial file for a later resume.
    """
    from huggingface_hub.utils import WeakFileLock, build_hf_headers

    endpoint_url = _endpoint(endpoint)
    cache = hub_cache_dir(cache_dir)
    local = Path(local_dir).expanduser() if local_dir is not None else None
    headers = build_hf_headers(token=token, library_name="spectune")
    headers["Accept-Encoding"] = "identity"  # byte ranges and sizes must be of the file itself

    plans: list[_Plan | None] = []
    for req in requests:
        if req.filename.startswith("/") or any(p in ("", ".", "..") for p in req.filename.split("/")):
            raise DownloadError(f"{req.filename!r} is not a file name inside a repository")
        if req.bundled_path is not None:
            plans.append(None)
            continue
        remote = _remote_metadata(req, endpoint_url, headers)
        plans.append(_plan(req, remote, cache, local, headers))
    meters = [
        _Meter(on_progress, req, p.total if p is not None else None, i, len(requests))
        for i, (req, p) in enumerate(zip(requests, plans))
    ]
    for plan, meter in zip(plans, meters):
        if plan is not None:
            _check_existing(plan, meter, cancel)
    _disk_check([p for p in plans if p is not None], disk_free)

    results = []
    for req, plan, meter in zip(requests, plans, meters):
        if plan is None:
            results.append(_bundled(req, meter, cancel))
        else:
            results.append(_fetch(plan, meter, cancel, chunk_bytes, retries, retry_wait_s, WeakFileLock))
    return results


def _bundled(req: FileRequest, meter: _Meter, cancel: threading.Event | None) -> DownloadResult:
    """A file shipped with SpecTune: nothing to fetch, but it is checked like a download."""
    assert req.bundled_path is not None
    path = Path(req.bundled_path)
    if not path.is_file():
        raise DownloadError(f"the bundled file {path} is missing: reinstall SpecTune or run scripts/setup.sh")
    size = path.stat().st_size
    if req.sha256 is not None:
        actual = _sha256(path, meter, cancel)
        if actual != req.sha256:
            raise ChecksumError(
                f"the bundled file {path} is damaged: its sha256 is {actual}, the catalog says "
                f"{req.sha256}; reinstall SpecTune"
            )
    meter.total = size
    meter.update(size, "done", force=True)
    return _result(req, None, path, size, req.sha256, "catalog" if req.sha256 else None, 0, 0, True)


def _fetch(
    plan: _Plan,
    meter: _Meter,
    cancel: threading.Event | None,
    chunk_bytes: int,
    retries: int,
    retry_wait_s: float,
    lock_factory: Callable,
) -> DownloadResult:
    req = plan.request
    received = 0
    if not plan.present:
        plan.lock.parent.mkdir(parents=True, exist_ok=True)
        with lock_factory(plan.lock):
            plan.resumed_from = min(_size(plan.partial), plan.total or 0)
            received = _transfer(plan, meter, cancel, chunk_bytes, retries, retry_wait_s)
            size = _size(plan.partial)
            if plan.total is not None and size != plan.total:
                raise DownloadError(
                    f"{req.filename} is {size} bytes after the download, the hub says {plan.total}; pull again"
                )
            if plan.expected_sha is not None:
                actual = _sha256(plan.partial, meter, cancel)
                if actual != plan.expected_sha:
                    plan.partial.unlink()
                    raise ChecksumError(
                        f"{req.repo}:{req.filename} is corrupt: its sha256 is {actual} but the "
                        f"{plan.sha_source} says {plan.expected_sha}; the download was deleted, "
                        "pull again to fetch it anew"
                    )
            plan.blob.parent.mkdir(parents=True, exist_ok=True)
            os.replace(plan.partial, plan.blob)
    if plan.in_cache and not (plan.final.exists() and plan.final.resolve() == plan.blob.resolve()):
        _link_into_snapshot(plan)
    size = plan.blob.stat().st_size
    meter.total = meter.total if meter.total is not None else size
    meter.update(size, "done", force=True)
    commit = plan.remote.commit if plan.remote is not None else None
    sha = (plan.expected_sha, plan.sha_source)
    return _result(
        req, commit, plan.final, size, *sha, received, plan.resumed_from, plan.present, plan.replaced_corrupt
    )


def _result(
    req: FileRequest,
    commit: str | None,
    path: Path,
    size: int,
    sha256: str | None,
    sha256_source: str | None,
    received: int,
    resumed_from: int,
    present: bool,
    replaced_corrupt: bool = False,
) -> DownloadResult:
    """What one file's download did; sha256_verified when a hash was there to check against."""
    verified = sha256 is not None
    return DownloadResult(
        req.role,
        req.repo,
        req.filename,
        req.revision,
        commit,
        str(path),
        size,
        sha256,
        sha256_source,
        verified,
        received,
        resumed_from,
        present,
        replaced_corrupt,
    )


# -- a pull: fetch, then check what was fetched ----------------------------------------------------


def pull(name: str, *, catalog: Any = None, check: bool = True, **download_options: Any) -> PullResult:
    """Download a preset's pair or one REPO:FILENAME, then run the GGUF check on each file and, for a pair,
    llama.cpp's draft/target rule (engine.models.compat). download_options go to download_files.

    A file that fails the GGUF check is reported in its gguf_error (it is what the hub holds, so it is kept).
    """
    preset, requests = resolve_name(name, catalog)
    results = download_files(requests, **download_options)
    compat = None
    if check:
        from engine.models.gguf_check import GGUFError, check_gguf

        for r in results:
            try:
                check_gguf(r.path, r.role)
            except GGUFError as exc:
                r.gguf_error = str(exc)
        by_role = {r.role: r for r in results}
        if preset is not None and "target" in by_role and "draft" in by_role and not any(r.gguf_error for r in results):
            from engine.models.compat import check_pair
            from engine.models.gguf_inspect import GGUFInspectError

            try:
                compat = check_pair(by_role["target"].path, by_role["draft"].path)
            except GGUFInspectError as exc:
                compat = {"compatible": False, "reasons": [str(exc)]}
    return PullResult(name, preset, results, compat)


def format_progress(p: Progress) -> str:
    """One line for a terminal: '[1/2] draft model.gguf  41.2% 310.0 MiB / 752.1 MiB  12.3 MiB/s  ETA 36 s'."""
    head = f"[{p.file_index + 1}/{p.file_count}] {p.filename}"
    if p.stage == "done":
        return f"{head}  done, {format_bytes(p.done_bytes)}"
    pct = f"{100.0 * p.fraction:5.1f}% " if p.fraction is not None else ""
    total = f" / {format_bytes(p.total_bytes)}" if p.total_bytes is not None else ""
    rate = f"  {format_bytes(p.rate_bytes_per_s)}/s" if p.rate_bytes_per_s else ""
    eta = f"  ETA {_duration(p.eta_s)}" if p.eta_s is not None else ""
    verb = "verifying " if p.stage == "verifying" else ""
    return f"{head}  {verb}{pct}{format_bytes(p.done_bytes)}{total}{rate}{eta}"


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"
