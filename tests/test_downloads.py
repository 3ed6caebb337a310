"""Downloads against a stand-in hub on 127.0.0.1 (tests/hub_server.py); the real hub is never asked."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.cli.library import register
from engine.models import downloads
from engine.models.downloads import (
    ChecksumError,
    DiskSpaceError,
    DownloadCancelled,
    DownloadError,
    FileRequest,
    Progress,
    format_progress,
    parse_repo_file,
    pull,
    resolve_name,
)
from engine.models.synthetic import PairSpec, write_pair

from .conftest import run_registered
from .hub_server import COMMIT, HubServer

REPO = "org/Tiny-GGUF"
TARGET = "tiny-target-F32.gguf"
DRAFT = "tiny-draft-F32.gguf"
CHUNK = 64 * 1024


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory) -> dict[str, bytes]:
    good = write_pair(tmp_path_factory.mktemp("dl_pair"), PairSpec())
    bad = write_pair(tmp_path_factory.mktemp("dl_pair_bad"), PairSpec(), draft_vocab_variant=1)
    return {"target": good[0].read_bytes(), "draft": good[1].read_bytes(), "bad_draft": bad[1].read_bytes()}


@pytest.fixture(autouse=True)
def offline_defaults(monkeypatch, tmp_path):
    """Anything that forgets the test's endpoint or cache hits a closed port and a scratch folder."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "default-cache"))
    monkeypatch.delenv("HF_HOME", raising=False)


@pytest.fixture
def hub():
    with HubServer() as server:
        yield server


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "hf-cache"


def fetch(hub: HubServer, cache: Path, name: str = f"{REPO}:{TARGET}", **kw):
    kw.setdefault("chunk_bytes", CHUNK)
    kw.setdefault("retry_wait_s", 0.01)
    return pull(name, cache_dir=cache, endpoint=hub.endpoint, **kw)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_dir(cache: Path) -> Path:
    return cache / "models--org--Tiny-GGUF" / "blobs"


# -- a normal download ---------------------------------------------------------------------------


def test_download_lands_in_the_hf_cache_verified_by_sha256(hub, cache, ggufs):
    hub.add(REPO, TARGET, ggufs["target"])
    events: list[Progress] = []
    result = fetch(hub, cache, on_progress=events.append)

    f = result.files[0]
    path = Path(f.path)
    assert path == cache / "models--org--Tiny-GGUF" / "snapshots" / COMMIT / TARGET
    assert path.is_symlink() and path.resolve() == (blob_dir(cache) / sha(ggufs["target"])).resolve()
    assert path.read_bytes() == ggufs["target"]
    assert (f.sha256, f.sha256_source, f.sha256_verified) == (sha(ggufs["target"]), "hub", True)
    assert (f.commit, f.already_present, f.resumed_from, f.gguf_error) == (COMMIT, False, 0, None)
    assert f.downloaded_bytes == f.size_bytes == len(ggufs["target"])
    assert result.to_dict()["model"] == f.path and result.compat is None
    # huggingface_hub itself finds the file where it would have put it
    from huggingface_hub import try_to_load_from_cache

    assert try_to_load_from_cache(REPO, TARGET, cache_dir=cache) == str(path)
    assert (cache / "models--org--Tiny-GGUF" / "refs" / "main").read_text() == COMMIT
    # one HEAD on the hub (redirected to the CDN), one GET on the CDN, no partial left
    assert [(r.server, r.method) for r in hub.requests] == [("hub", "HEAD"), ("cdn", "GET")]
    assert not list(blob_dir(cache).glob("*.incomplete"))
    # progress: byte counts only grow, against the hub's size, and the last event says done
    done = [e.done_bytes for e in events if e.stage == "downloading"]
    assert done == sorted(done) and events[-1].stage == "done"
    assert events[-1].done_bytes == events[-1].total_bytes == len(ggufs["target"])
    assert {(e.file_index, e.file_count) for e in events} == {(0, 1)}


def test_a_second_pull_finds_the_file_and_fetches_nothing(hub, cache, ggufs):
    hub.add(REPO, TARGET, ggufs["target"])
    first = fetch(hub, cache).files[0]
    again = fetch(hub, cache).files[0]
    assert again.already_present and again.downloaded_bytes == 0 and again.path == first.path
    assert again.sha256_verified
    assert len(hub.gets()) == 1


def test_local_dir_gets_the_plain_file_and_a_foreign_file_is_never_overwritten(hub, tmp_path, ggufs):
    hub.add(REPO, TARGET, ggufs["target"])
    out = tmp_path / "models"
    f = pull(f"{REPO}:{TARGET}", local_dir=out, endpoint=hub.endpoint).files[0]
    assert Path(f.path) == out / TARGET and not Path(f.path).is_symlink()
    assert Path(f.path).read_bytes() == ggufs["target"] and f.sha256_verified

    other = tmp_path / "other"
    other.mkdir()
    (other / TARGET).write_bytes(b"my own file")
    with pytest.raises(ChecksumError, match="already exists"):
        pull(f"{REPO}:{TARGET}", local_dir=other, endpoint=hub.endpoint)
    assert (other / TARGET).read_bytes() == b"my own file"


# -- interruptions --------------------------------------------------------------------------------


def test_a_dropped_connection_resumes_with_a_range_request(hub, cache, ggufs):
    hub.add(REPO, TARGET, ggufs["target"], drop_after=1_000_000, drop_times=1)
    f = fetch(hub, cache).files[0]
    assert Path(f.path).read_bytes() == ggufs["target"] and f.sha256_verified
    first, second = hub.gets()
    assert first.range is None
    start = int(second.range.removeprefix("bytes=").rstrip("-"))
    assert 0 < start <= 1_000_000  # what reached the disk before the drop is not fetched again
    assert f.downloaded_bytes == len(ggufs["target"])


def test_a_failed_download_keeps_its_partial_and_the_next_pull_resumes_it(hub, cache, ggufs):
    data = ggufs["target"]
    hosted = hub.add(REPO, TARGET, data, drop_after=1_000_000, drop_times=100)
    with pytest.raises(DownloadError, match="interrupted.*pull again to resume") as info:
        fetch(hub, cache, retries=1)
    assert "Traceback" not in str(info.value)
    partial = blob_dir(cache) / f"{sha(data)}.incomplete"
    kept = partial.stat().st_size
    assert 0 < kept <= 1_000_000 and partial.read_bytes() == data[:kept]

    hosted.drop_times = 0
    hub.requests.clear()
    f = fetch(hub, cache).files[0]
    assert Path(f.path).read_bytes() == data and f.sha256_verified
    assert f.resumed_from == kept and f.downloaded_bytes == len(data) - kept
    assert [r.range for r in hub.gets()] == [f"bytes={kept}-"]
    assert not partial.exists()


def test_cancel_stops_mid_file_and_leaves_a_resumable_partial(hub, cache, ggufs):
    data = ggufs["target"]
    hosted = hub.add(REPO, TARGET, data, throttle_s=0.02)
    cancel = threading.Event()
    events: list[Progress] = []

    def on_progress(p: Progress) -> None:
        events.append(p)
        if p.done_bytes >= 4 * CHUNK:
            cancel.set()

    with pytest.raises(DownloadCancelled, match="cancelled.*pull again to resume") as info:
        fetch(hub, cache, cancel=cancel, on_progress=on_progress)
    partial = info.value.partial
    assert partial == blob_dir(cache) / f"{sha(data)}.incomplete"
    assert 4 * CHUNK <= info.value.kept_bytes == partial.stat().st_size < len(data)
    assert partial.read_bytes() == data[: info.value.kept_bytes]
    assert not (blob_dir(cache) / sha(data)).exists()
    # a throttled transfer is long enough to measure: rate and ETA were reported
    assert any(e.rate_bytes_per_s and e.eta_s is not None for e in events)

    hosted.throttle_s = 0.0
    f = fetch(hub, cache).files[0]
    assert f.resumed_from == info.value.kept_bytes and Path(f.path).read_bytes() == data


# -- corruption -------------------------------------------------------------------------------------


def test_a_corrupted_transfer_is_rejected_deleted_and_never_linked(hub, cache, ggufs):
    data = ggufs["target"]
    hub.add(REPO, TARGET, data, corrupt=True)
    with pytest.raises(ChecksumError) as info:
        fetch(hub, cache)
    message = str(info.value)
    assert "corrupt" in message and sha(data) in message and "deleted" in message
    assert not list(blob_dir(cache).iterdir())
    assert not (cache / "models--org--Tiny-GGUF" / "snapshots" / COMMIT / TARGET).exists()
    from huggingface_hub import try_to_load_from_cache

    assert try_to_load_from_cache(REPO, TARGET, cache_dir=cache) is None


def test_a_corrupted_cached_blob_is_found_and_fetched_again(hub, cache, ggufs):
    data = ggufs["target"]
    hub.add(REPO, TARGET, data)
    blob = Path(fetch(hub, cache).files[0].path).resolve()
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 0x01
    blob.write_bytes(bytes(damaged))
    f = fetch(hub, cache).files[0]
    assert f.replaced_corrupt and not f.already_present
    assert Path(f.path).read_bytes() == data


@dataclass
class _ModelFile:
    model: str
    quant: str
    repo: str
    filename: str
    size_bytes: int | None
    sha256: str | None


@dataclass
class _Preset:
    name: str
    target: _ModelFile
    draft: _ModelFile


class _Catalog:
    """Stands for engine.models.catalog's Catalog: preset(name) or a ValueError naming the known presets."""

    def __init__(self, *presets: _Preset):
        self.presets = {p.name: p for p in presets}

    def preset(self, name: str) -> _Preset:
        if name not in self.presets:
            raise ValueError(f"unknown preset {name!r}; known: {', '.join(self.presets)}")
        return self.presets[name]


def tiny_catalog(ggufs, draft_key: str = "draft", target_sha: str | None = None) -> _Catalog:
    t, d = ggufs["target"], ggufs[draft_key]
    return _Catalog(
        _Preset(
            "tiny-pair",
            _ModelFile("tiny", "F32", REPO, TARGET, len(t), target_sha or sha(t)),
            _ModelFile("tiny-draft", "F32", REPO, DRAFT, len(d), sha(d)),
        )
    )


def test_a_catalog_hash_that_differs_from_the_hubs_fails_before_any_byte(hub, cache, ggufs):
    hub.add(REPO, TARGET, ggufs["target"])
    hub.add(REPO, DRAFT, ggufs["draft"])
    with pytest.raises(ChecksumError, match="catalog needs updating"):
        fetch(hub, cache, name="tiny-pair", catalog=tiny_catalog(ggufs, target_sha="ab" * 32))
    assert hub.gets() == []


# -- disk space -------------------------------------------------------------------------------------


def test_not_enough_disk_space_fails_first_naming_needed_and_free_bytes(hub, cache, ggufs):
    hub.add(REPO, TARGET, ggufs["target"])
    hub.add(REPO, DRAFT, ggufs["draft"])
    needed = len(ggufs["target"]) + len(ggufs["draft"])
    with pytest.raises(DiskSpaceError) as info:
        fetch(hub, cache, name="tiny-pair", catalog=tiny_catalog(ggufs), disk_free=lambda path: needed - 1)
    assert (info.value.needed_bytes, info.value.free_bytes) == (needed, needed - 1)
    assert f"needs {needed} bytes" in str(info.value) and f"only {needed - 1} bytes" in str(info.value)
    assert hub.gets() == [] and not blob_dir(cache).exists()
    # exactly enough is enough
    fetch(hub, cache, name="tiny-pair", catalog=tiny_catalog(ggufs), disk_free=lambda path: needed)


def test_the_disk_check_counts_only_the_bytes_a_resume_still_needs(hub, cache, ggufs):
    data = ggufs["target"]
    hosted = hub.add(REPO, TARGET, data, drop_after=1_000_000, drop_times=100)
    with pytest.raises(DownloadError):
        fetch(hub, cache, retries=0)
    kept = (blob_dir(cache) / f"{sha(data)}.incomplete").stat().st_size
    hosted.drop_times = 0
    with pytest.raises(DiskSpaceError, match=f"needs {len(data) - kept} bytes"):
        fetch(hub, cache, disk_free=lambda path: len(data) - kept - 1)
    assert fetch(hub, cache, disk_free=lambda path: len(data) - kept).files[0].resumed_from == kept


# -- presets and checks -----------------------------------------------------------------------------


def test_a_preset_pulls_target_and_draft_and_checks_the_pair(hub, cache, ggufs):
    hub.add(REPO, TARGET, ggufs["target"])
    hub.add(REPO, DRAFT, ggufs["draft"])
    events: list[Progress] = []
    result = fetch(hub, cache, name="tiny-pair", catalog=tiny_catalog(ggufs), on_progress=events.append)
    assert result.preset == "tiny-pair"
    assert [f.role for f in result.files] == ["target", "draft"]
    assert all(f.sha256_source == "catalog" and f.sha256_verified and f.gguf_error is None for f in result.files)
    assert result.compat == {"compatible": True, "reasons": []}
    d = result.to_dict()
    assert Path(d["target"]).read_bytes() == ggufs["target"] and Path(d["draft"]).read_bytes() == ggufs["draft"]
    assert {e.file_index for e in events} == {0, 1} and {e.file_count for e in events} == {2}


def test_a_preset_whose_draft_llama_cpp_would_refuse_says_so(hub, cache, ggufs):
    hub.add(REPO, TARGET, ggufs["target"])
    hub.add(REPO, DRAFT, ggufs["bad_draft"])
    result = fetch(hub, cache, name="tiny-pair", catalog=tiny_catalog(ggufs, draft_key="bad_draft"))
    assert result.compat["compatible"] is False and "token text differs" in result.compat["reasons"][0]


def test_a_file_that_is_not_a_gguf_is_reported_by_the_gguf_check(hub, cache):
    hub.add(REPO, "broken.gguf", b"this is not a model " * 100)
    f = fetch(hub, cache, name=f"{REPO}:broken.gguf").files[0]
    assert f.sha256_verified and "not a GGUF file" in f.gguf_error


def test_unknown_repos_files_and_presets_are_named(hub, cache, ggufs):
    hub.add(REPO, TARGET, ggufs["target"])
    with pytest.raises(DownloadError, match="repository org/Nope not found"):
        fetch(hub, cache, name="org/Nope:x.gguf")
    with pytest.raises(DownloadError, match="has no file 'missing.gguf'"):
        fetch(hub, cache, name=f"{REPO}:missing.gguf")
    with pytest.raises(DownloadError, match="has no revision 'v9'"):
        fetch(hub, cache, name=f"{REPO}@v9:{TARGET}")
    with pytest.raises(ValueError, match="known: tiny-pair"):
        fetch(hub, cache, name="no-such-preset", catalog=tiny_catalog(ggufs))


def test_an_unreachable_hub_and_a_refusing_cdn_are_said_plainly(hub, cache, ggufs):
    with pytest.raises(DownloadError, match="cannot reach the hub at http://127.0.0.1:9"):
        pull(f"{REPO}:{TARGET}", cache_dir=cache)  # HF_ENDPOINT: the closed port of offline_defaults
    hub.add(REPO, TARGET, ggufs["target"], cdn_status=403)
    with pytest.raises(DownloadError, match="answered HTTP 403 for tiny-target-F32.gguf.*pull again"):
        fetch(hub, cache)


def test_a_file_name_that_climbs_out_of_the_repository_is_refused(hub, tmp_path):
    with pytest.raises(DownloadError, match="not a file name inside a repository"):
        fetch(hub, tmp_path / "c", name="org/repo:../../escape.gguf")
    assert hub.requests == []


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "bartowski/Qwen2.5-0.5B-Instruct-GGUF:Qwen2.5-0.5B-Instruct-Q8_0.gguf",
            FileRequest("bartowski/Qwen2.5-0.5B-Instruct-GGUF", "Qwen2.5-0.5B-Instruct-Q8_0.gguf"),
        ),
        ("org/repo@v1.0:sub/dir/model.GGUF", FileRequest("org/repo", "sub/dir/model.GGUF", "v1.0")),
        ("qwen2.5-7b", None),
        ("org/repo:model.bin", None),
        ("org/repo@:m.gguf", None),
        ("repo:m.gguf", None),
    ],
)
def test_parse_repo_file(name, expected):
    assert parse_repo_file(name) == expected


@pytest.mark.parametrize("name", ["org/repo", "org/repo:model.safetensors", "a:b:c"])
def test_names_that_are_neither_presets_nor_repo_files_are_refused(name):
    with pytest.raises(DownloadError, match="neither a preset name nor REPO:FILENAME"):
        resolve_name(name, catalog=_Catalog())


def test_format_progress_reads_like_a_progress_line():
    line = format_progress(Progress("draft", "m.gguf", "downloading", 3 * 2**20, 12 * 2**20, 2**20, 9.0, 1, 2))
    assert line == "[2/2] m.gguf   25.0% 3.0 MiB / 12.0 MiB  1.0 MiB/s  ETA 9 s"
    assert (
        format_progress(Progress("model", "m.gguf", "done", 2**30, 2**30, None, None, 0, 1))
        == "[1/1] m.gguf  done, 1.0 GiB"
    )


def test_the_catalog_adapter_reads_engine_catalog_presets():
    """With engine/models/catalog.py and its data present, every preset maps to a target and a draft request."""
    catalog_module = pytest.importorskip("engine.models.catalog")
    try:
        catalog = catalog_module.load_catalog()
    except catalog_module.CatalogError as exc:
        pytest.skip(f"no catalog data yet: {exc}")
    assert catalog.presets, "the catalog lists no presets"
    for preset in catalog.presets:
        name, requests = resolve_name(preset.name, catalog)
        assert name == preset.name and [r.role for r in requests] == ["target", "draft"]
        for r, mf in zip(requests, (preset.target, preset.draft)):
            assert (r.repo, r.filename, r.size_bytes) == (mf.repo, mf.filename, mf.size_bytes)
            assert (r.bundled_path is not None) == mf.bundled


def test_a_bundled_preset_file_is_checked_not_fetched(hub, cache, ggufs, tmp_path):
    hub.add(REPO, TARGET, ggufs["target"])
    shipped = tmp_path / "resources" / DRAFT
    shipped.parent.mkdir()
    shipped.write_bytes(ggufs["draft"])

    @dataclass
    class _Bundled(_ModelFile):
        bundled_path: Path | None = None

    catalog = tiny_catalog(ggufs)
    d = catalog.presets["tiny-pair"].draft
    catalog.presets["tiny-pair"].draft = _Bundled(
        d.model, d.quant, "bundled", DRAFT, d.size_bytes, d.sha256, bundled_path=shipped
    )
    result = fetch(hub, cache, name="tiny-pair", catalog=catalog)
    draft = result.files[1]
    assert draft.path == str(shipped) and draft.already_present and draft.sha256_verified
    assert result.compat["compatible"] is True and len(hub.gets()) == 1

    shipped.write_bytes(b"x" + ggufs["draft"][1:])
    with pytest.raises(ChecksumError, match="bundled file .* is damaged"):
        fetch(hub, cache, name="tiny-pair", catalog=catalog)


# -- the command line -------------------------------------------------------------------------------


def run_cli(args: list[str], capsys, **register_kw) -> tuple[int, str, str]:
    return run_registered(register, args, capsys, **register_kw)


def test_cli_pull_json_prints_one_object_with_the_paths(hub, cache, ggufs, capsys):
    hub.add(REPO, TARGET, ggufs["target"])
    hub.add(REPO, DRAFT, ggufs["draft"])
    rc, out, err = run_cli(
        ["pull", "tiny-pair", "--cache-dir", str(cache), "--json"],
        capsys,
        catalog=tiny_catalog(ggufs),
        download_options={"endpoint": hub.endpoint},
    )
    assert rc == 0 and out.count("\n") == 1
    d = json.loads(out)
    assert Path(d["target"]).read_bytes() == ggufs["target"] and d["compat"]["compatible"] is True
    assert "[1/2] tiny-target-F32.gguf  done" in err and "[2/2] tiny-draft-F32.gguf  done" in err


def test_cli_pull_errors_are_one_line_with_exit_code_2(hub, cache, ggufs, capsys):
    hub.add(REPO, TARGET, ggufs["target"])
    for args, options, fragment in [
        (["pull", "org/Nope:x.gguf"], {}, "repository org/Nope not found"),
        (["pull", f"{REPO}:{TARGET}"], {"disk_free": lambda path: 10}, "not enough free disk space"),
        (["pull", "nope"], {}, "unknown preset 'nope'"),
    ]:
        rc, out, err = run_cli(
            [*args, "--cache-dir", str(cache)],
            capsys,
            catalog=tiny_catalog(ggufs),
            download_options={"endpoint": hub.endpoint, **options},
        )
        assert rc == 2 and out == "" and err.startswith("spectune: error: ") and err.count("\n") == 1, err
        assert fragment in err and "Traceback" not in err


def test_spectune_pull_through_the_real_command_line(hub, tmp_path, ggufs, monkeypatch, capsys):
    """engine.cli.main registers pull; HF_ENDPOINT and HF_HUB_CACHE are read when the command runs."""
    from engine.cli.main import main

    hub.add(REPO, TARGET, ggufs["target"])
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "env-cache"))
    assert main(["pull", f"{REPO}:{TARGET}", "--json", "--quiet"]) == 0
    out, err = capsys.readouterr()
    path = Path(json.loads(out)["model"])
    assert path.is_relative_to(tmp_path / "env-cache") and path.read_bytes() == ggufs["target"]
    assert err == ""


def test_module_reads_no_endpoint_at_import(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://example.invalid/")
    assert downloads._endpoint(None) == "http://example.invalid"


def test_the_terminal_progress_line_is_rewritten_in_place():
    import io

    from engine.cli.library import _ProgressPrinter

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    printer = _ProgressPrinter(out)
    printer(Progress("model", "m.gguf", "downloading", 2**20, 4 * 2**20, 2**20, 3.0, 0, 1))
    printer(Progress("model", "m.gguf", "downloading", 2 * 2**20, 4 * 2**20, 2**20, 2.0, 0, 1))
    printer(Progress("model", "m.gguf", "done", 4 * 2**20, 4 * 2**20, None, None, 0, 1))
    text = out.getvalue()
    lines = text.split("\r")[1:]
    assert len(lines) == 3 and text.count("\n") == 1 and text.endswith("\n")
    # the shorter last line is padded so nothing of the longer one before it stays on screen
    assert lines[2].startswith("[1/1] m.gguf  done, 4.0 MiB") and len(lines[2]) == len(lines[1]) + 1
