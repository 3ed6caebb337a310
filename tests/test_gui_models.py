"""The Models page offscreen: the library scan of fake model trees, downloads against the stand-in hub
(tests/hub_server.py), and recommendations for a stand-in NVML (tests/fake_nvml.py). Nothing is mocked:
the page runs the engine's scan, pull and recommend in its background threads."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QSettings, Qt  # noqa: E402

from app.engine_controller import EngineController  # noqa: E402
from app.main_window import MainWindow  # noqa: E402
from app.pages.hardware import HardwarePage  # noqa: E402
from app.pages.lab.page import LabPage  # noqa: E402
from app.pages.models.page import ModelsPage  # noqa: E402
from app.session import CUSTOM_PROMPT  # noqa: E402
from engine.core.paths import cache_dir  # noqa: E402
from engine.core.workloads import suggested_workload  # noqa: E402
from engine.models.catalog import CATALOG_DIR, load_catalog  # noqa: E402
from engine.models.demo_models import MODELS_DIR as BUNDLED_DIR  # noqa: E402
from engine.models.library import Source, default_sources, scan  # noqa: E402
from engine.models.synthetic import PairSpec, write_pair  # noqa: E402

from .fake_nvml import NVML_ERROR_DRIVER_NOT_LOADED, FakeGpu, FakeNVML  # noqa: E402
from .hub_server import HubServer  # noqa: E402

WAIT = 60_000  # ms; the machine may be busy
REPO = "org/Tiny-GGUF"
TARGET = "tiny-target-F32.gguf"
DRAFT = "tiny-draft-F32.gguf"
COMMIT = "a" * 40
USER_CACHE = cache_dir()  # read before the fixtures move HOME
# the demo pair SpecTune ships is in every library (a source of its own): its files and pairs come on top
BUNDLED = scan([Source("bundled", BUNDLED_DIR)], cache=None)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """T: a target, D: its draft, B: a draft whose vocabulary llama.cpp refuses for T."""
    t, d = write_pair(tmp_path_factory.mktemp("gm_pair"), PairSpec())
    _, b = write_pair(tmp_path_factory.mktemp("gm_bad"), PairSpec(), draft_vocab_variant=1)
    return {"T": t, "D": d, "B": b}


@pytest.fixture
def places(tmp_path, monkeypatch) -> dict[str, Path]:
    """Every place the library and the downloads look at moved under tmp_path; the hub is a closed port
    unless a test starts the stand-in."""
    p = {
        "home": tmp_path / "home",
        "hf": tmp_path / "hf-cache",
        "ollama": tmp_path / "ollama",
        "llama": tmp_path / "llama-cache",
        "data": tmp_path / "data",
    }
    p["home"].mkdir()
    monkeypatch.setenv("HOME", str(p["home"]))
    monkeypatch.setenv("HF_HUB_CACHE", str(p["hf"]))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("OLLAMA_MODELS", str(p["ollama"]))
    monkeypatch.setenv("LLAMA_CACHE", str(p["llama"]))
    monkeypatch.setenv("SPECTUNE_DATA_DIR", str(p["data"]))
    monkeypatch.setenv("SPECTUNE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    return p


def put(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def hf_file(cache: Path, repo: str, filename: str, src: Path) -> Path:
    """huggingface_hub's layout: blobs/<sha256> and snapshots/<commit>/<file> linking to it."""
    storage = cache / f"models--{repo.replace('/', '--')}"
    data = src.read_bytes()
    blob = put(storage / "blobs" / hashlib.sha256(data).hexdigest(), data)
    link = storage / "snapshots" / COMMIT / filename
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(blob, link.parent), link)
    put(storage / "refs" / "main", COMMIT.encode())
    return link


def ollama_model(root: Path, name_parts: tuple[str, ...], src: Path) -> Path:
    """manifests/HOST/NAMESPACE/MODEL/TAG naming blobs/sha256-HEX, as Ollama keeps a pulled model."""
    data = src.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    blob = put(root / "blobs" / f"sha256-{digest}", data)
    manifest = {
        "schemaVersion": 2,
        "layers": [
            {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": len(data)}
        ],
    }
    put(root / "manifests" / Path(*name_parts), json.dumps(manifest).encode())
    return blob


@pytest.fixture(scope="module")
def tiny_catalog(tmp_path_factory):
    """The shipped quants plus one family whose files live in REPO on the stand-in hub, and one preset."""
    root = tmp_path_factory.mktemp("catalog")
    shutil.copyfile(CATALOG_DIR / "quants.json", root / "quants.json")

    def model(model_id: str, filename: str, n_layer: int, params: int) -> dict:
        return {
            "id": model_id,
            "name": model_id,
            "arch": {
                "llama_arch": "llama",
                "n_layer": n_layer,
                "n_embd": 128,
                "n_head": 4,
                "n_head_kv": 2,
                "head_dim": 32,
                "n_ff": 256,
                "n_vocab": 512,
                "n_ctx_train": 16384,
                "tied_embeddings": True,
                "params": params,
            },
            "gguf": {"repo": REPO, "quants": ["F16"], "files": {"F16": filename}},
        }

    family = {
        "format": 1,
        "family": {"id": "tiny", "name": "Tiny", "tokenizer": "tiny"},
        "models": [model("tiny-target", TARGET, 4, 4_000_000), model("tiny-draft", DRAFT, 1, 1_000_000)],
    }
    (root / "families").mkdir()
    (root / "families" / "tiny.json").write_text(json.dumps(family))
    presets = {
        "format": 1,
        "presets": [
            {
                "name": "tiny-pair",
                "description": "the tiny target drafted by the tiny draft",
                "target": "tiny-target",
                "target_quant": "F16",
                "draft": "tiny-draft",
                "draft_quant": "F16",
            }
        ],
    }
    (root / "presets.json").write_text(json.dumps(presets))
    tokenizers = {"format": 1, "tokenizers": [{"id": "tiny", "name": "Tiny", "vocab_gguf": None}]}
    (root / "tokenizers.json").write_text(json.dumps(tokenizers))
    return load_catalog(root)


@pytest.fixture
def make_page(qtbot, places, tiny_catalog):
    """A Models page over real Lab and Hardware pages (the engine worker is never started)."""
    made = []

    def make(nvml=None, **kw) -> ModelsPage:
        controller = EngineController()
        lab = LabPage(controller)
        hardware = HardwarePage(controller, nvml=nvml if nvml is not None else FakeNVML([FakeGpu()]))
        kw.setdefault("catalog", tiny_catalog)
        page = ModelsPage(lab.session, hardware, controller=controller, **kw)
        for w in (lab, hardware, page):
            qtbot.addWidget(w)
        made.append((page, lab, hardware))
        page.resize(1100, 800)
        page.show()
        return page

    yield make
    for page, lab, hardware in made:
        # what MainWindow.closeEvent does for these pages: no timer fires into a page being deleted
        for timer in (lab.chart_timer, lab.text_timer, hardware.timer):
            timer.stop()
        page.close()  # the page's own close: its threads stop (the same path as the main window's)


@pytest.fixture
def hub(places, monkeypatch):
    with HubServer() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        yield server


def wait_ranked(qtbot, page: ModelsPage) -> None:
    qtbot.waitUntil(lambda: page.catalog_view is not None and not page.rank_job.running, timeout=WAIT)


# -- the library ---------------------------------------------------------------------------------


def test_scan_fills_the_table_and_selecting_sets_the_lab(qtbot, make_page, places, models, tmp_path):
    hf_t = hf_file(places["hf"], REPO, TARGET, models["T"])
    ollama_d = ollama_model(places["ollama"], ("registry.ollama.ai", "library", "tiny", "latest"), models["D"])
    broken = put(places["home"] / ".lmstudio" / "models" / "pub" / "X-GGUF" / "broken.gguf", b"GGUF" + b"\xff" * 40)

    page = make_page()
    lib = page.library
    qtbot.waitUntil(lambda: lib.library is not None and not lib.scanning, timeout=WAIT)
    table = lib.table
    assert table.rowCount() == 3 + len(BUNDLED.models)
    rows = {
        table.item(r, 5).text(): [table.item(r, c).text() for c in range(table.columnCount())]
        for r in range(table.rowCount())
    }
    assert rows[str(hf_t)][:2] == [f"{REPO}:{TARGET}", "huggingface"]
    assert rows[str(hf_t)][3].startswith("llama") and rows[str(hf_t)][4] == "F32"
    assert rows[str(ollama_d)][:2] == ["tiny:latest", "ollama"]
    assert rows[str(broken)][3].startswith("✗") and "GGUF" in rows[str(broken)][3]
    assert "1 unreadable" in lib.status.text()
    # the compatible pairs: the larger model is the target
    assert lib.pairs.rowCount() == 1 + len(BUNDLED.pairs)
    assert (lib.pairs.item(0, 0).text(), lib.pairs.item(0, 1).text()) == (f"{REPO}:{TARGET}", "tiny:latest")
    # each pair's speed predicted here, in the background: tokens/s and the best K, and why in the tooltip
    qtbot.waitUntil(lambda: all(lib.pairs.item(r, 2).text() != "…" for r in range(lib.pairs.rowCount())), timeout=WAIT)
    predicted = lib.pairs.item(0, 2)
    assert predicted.text().startswith("~") and "tok/s" in predicted.text()
    assert "speculation" in predicted.toolTip() and "predicted from" in predicted.toolTip()

    session = page.session
    lib.select_paths(ollama_d)
    assert "pairs with" in lib.selection_label.text() and TARGET in lib.selection_label.text()
    lib.draft_button.click()
    assert session.draft() == ollama_d
    # two rows: whichever order they were picked in, the larger one becomes the target
    lib.select_paths(ollama_d, hf_t)
    assert "compatible" in lib.selection_label.text()
    session.set_draft(None)
    session.set_workload(CUSTOM_PROMPT)
    session.set_custom_prompt("")
    lib.use_button.click()
    assert (session.target(), session.draft()) == (hf_t, ollama_d)
    # two files llama.cpp would refuse as a pair: the reason, and nothing to send to the Lab (issue 51)
    demo = next(m.path for m in BUNDLED.models if "demo-target" in m.path)
    lib.select_paths(hf_t, demo)
    assert not lib.use_button.isEnabled()
    qtbot.waitUntil(lambda: "not a pair llama.cpp accepts:" in lib.selection_label.text(), timeout=WAIT)
    assert lib.selection_label.text().split("accepts:")[-1].strip()  # llama.cpp's reason, whatever it is
    lib.select_paths(ollama_d, hf_t)
    # the Lab had no workload (issue 30 #3: Start then said "write a prompt"): the pair brings the set that
    # suits its target, and Start can run at once
    assert session.workload() == suggested_workload(str(hf_t)) and session.collect_prompts()
    qtbot.waitUntil(lambda: "✓ compatible" in page.compat_badge.text(), timeout=WAIT)
    # a broken file cannot be handed over
    lib.select_paths(broken)
    assert not lib.use_button.isEnabled()
    # a pair from the pairs table
    session.set_pair(None, None)
    session.set_workload(CUSTOM_PROMPT)
    session.set_custom_prompt("my own prompt")
    lib.pairs.selectRow(0)
    lib.pair_button.click()
    assert (session.target(), session.draft()) == (hf_t, ollama_d)
    assert session.workload() == CUSTOM_PROMPT  # a prompt the user typed stays theirs

    # a folder of the user's own, added and removed again
    mine = tmp_path / "my-models"
    put(mine / "odd-draft.gguf", models["B"].read_bytes())
    assert lib.add_folder(mine)
    qtbot.waitUntil(lambda: not lib.scanning and table.rowCount() == 4 + len(BUNDLED.models), timeout=WAIT)
    assert lib.remove_button.isEnabled() and str(mine) in lib.remove_button.toolTip()
    assert not lib.add_folder(tmp_path / "nowhere") and "is not a folder" in lib.status.text()
    assert lib.remove_folder(mine)
    qtbot.waitUntil(lambda: not lib.scanning and table.rowCount() == 3 + len(BUNDLED.models), timeout=WAIT)
    assert not lib.remove_button.isEnabled()


# -- downloads ---------------------------------------------------------------------------------


def test_preset_download_shows_progress_cancels_and_resumes(qtbot, make_page, hub, places, models):
    target_bytes = models["T"].read_bytes()
    hosted = hub.add(REPO, TARGET, target_bytes, throttle_s=0.04)  # ~2 s: a cancel lands mid-file
    hub.add(REPO, DRAFT, models["D"].read_bytes())
    page = make_page()
    presets = page.presets
    wait_ranked(qtbot, page)
    row = presets.row("tiny-pair")
    assert row is not None and row.fit is True and row.size_text != "?"
    assert not row.use_button.isEnabled() and row.download_button.text() == "Download"

    row.download_button.click()
    assert row.state == "running" and row.cancel_button.isEnabled()
    # bytes, rate and ETA on the bar while it runs
    qtbot.waitUntil(lambda: "ETA" in row.bar.format() and "/s" in row.bar.format(), timeout=WAIT)
    assert 0 < row.bar.value() < 1000 and "MiB" in row.bar.format()
    row.cancel_button.click()
    qtbot.waitUntil(lambda: row.state == "cancelled", timeout=WAIT)
    assert row.download_button.text() == "Resume" and not row.use_button.isEnabled()
    assert "cancelled" in presets.details.text() and "resume" in presets.details.text()
    partial = list((places["hf"] / "models--org--Tiny-GGUF" / "blobs").glob("*.incomplete"))
    assert len(partial) == 1 and 0 < partial[0].stat().st_size < len(target_bytes)
    kept = partial[0].stat().st_size

    hosted.throttle_s = 0.0
    row.download_button.click()
    qtbot.waitUntil(lambda: row.state == "done", timeout=WAIT)
    assert f"resumed from byte {kept}" in presets.details.text()
    assert any(r.range == f"bytes={kept}-" for r in hub.gets())
    assert row.bar.value() == 1000 and row.use_button.isEnabled()
    assert row.use_button.isEnabled()
    row.use_button.click()
    session = page.session
    assert session.target().name == TARGET and session.draft().name == DRAFT
    assert session.target().read_bytes() == target_bytes
    qtbot.waitUntil(lambda: "✓ compatible" in page.compat_badge.text(), timeout=WAIT)
    # the finished download is in the library, and the preset knows its files from there
    qtbot.waitUntil(
        lambda: (
            page.library.library is not None
            and not page.library.scanning
            and page.library.table.rowCount() == 2 + len(BUNDLED.models)
        ),
        timeout=WAIT,
    )


def test_a_corrupt_or_too_large_download_says_so(qtbot, make_page, hub, models, places):
    hub.add(REPO, DRAFT, models["D"].read_bytes(), corrupt=True)
    hub.add(REPO, TARGET, models["T"].read_bytes())
    page = make_page()
    presets = page.presets
    wait_ranked(qtbot, page)

    presets.repo_file.setText("not a file name")
    presets._download_repo_file()
    assert "is not REPO:FILENAME" in presets.details.text()

    presets.repo_file.setText(f"{REPO}:{DRAFT}")
    presets._download_repo_file()
    row = presets.row(f"{REPO}:{DRAFT}")
    qtbot.waitUntil(lambda: row.state == "failed", timeout=WAIT)
    assert "corrupt" in row.bar.format()
    assert "sha256" in presets.details.text() and "corrupt" in presets.details.text()
    assert not row.use_button.isEnabled()

    # a disk that is too small: said before a byte is fetched
    presets.download_options["disk_free"] = lambda path: 1000
    presets.repo_file.setText(f"{REPO}:{TARGET}")
    presets._download_repo_file()
    big = presets.row(f"{REPO}:{TARGET}")
    qtbot.waitUntil(lambda: big.state == "failed", timeout=WAIT)
    assert "not enough disk space" in presets.details.text()
    del presets.download_options["disk_free"]
    big.download_button.click()
    qtbot.waitUntil(lambda: big.state == "done", timeout=WAIT)
    big.use_button.click()
    assert page.session.target().name == TARGET


# -- recommendations ---------------------------------------------------------------------------


@pytest.mark.slow
def test_recommendations_for_the_gpu_nvml_reports(qtbot, tmp_path, places):
    """The main window's Hardware page hands its NVML (here a stand-in RTX 4090) to the Models page."""
    w = MainWindow(settings=QSettings(str(tmp_path / "m.ini"), QSettings.Format.IniFormat), nvml=FakeNVML([FakeGpu()]))
    qtbot.addWidget(w)
    w.show()
    w.show_page("Models")
    page = w.models
    try:
        wait_ranked(qtbot, page)
        rec = page.recommend
        assert rec.result is not None and rec.result.budget.kind == "gpu"
        assert "RTX 4090" in rec.budget_label.text()
        top = rec.tree.topLevelItem(0)
        assert top.childCount() == len(rec.result.recommended) > 0
        first = top.child(0)
        reasons = [first.child(i).text(0) for i in range(first.childCount())]
        assert reasons == rec.result.recommended[0].reasons()
        assert any(r.startswith("memory:") for r in reasons) and any("K=" in r for r in reasons)
        groups = [rec.tree.topLevelItem(i).text(0) for i in range(rec.tree.topLevelItemCount())]
        assert any(g.startswith("Near misses") for g in groups)
        misses = next(
            rec.tree.topLevelItem(i)
            for i in range(rec.tree.topLevelItemCount())
            if rec.tree.topLevelItem(i).text(0).startswith("Near misses")
        )
        assert misses.child(0).child(0).text(0).startswith("why not:")
        # the presets got their sizes and fits for the same budget
        assert page.presets.table.rowCount() == len(page.catalog_view.catalog.presets)
        assert any(r.fit is True for r in page.presets.rows) and any(r.fit is False for r in page.presets.rows)

        # Download hands the pair to the downloads tab: a preset's own row, or a new row for a pair that
        # has no preset; the hub here is a closed port, which the row says
        n_rows = len(page.presets.rows)
        items = [top.child(i) for i in range(top.childCount())]
        with_preset = next(i for i in items if i.data(0, Qt.ItemDataRole.UserRole).preset)
        without = next(i for i in items if not i.data(0, Qt.ItemDataRole.UserRole).preset)
        for item in (with_preset, without):
            rec.tree.setCurrentItem(item.child(0))  # a reason line selects its pair too
            assert rec.download_button.isEnabled()
            rec.download_button.click()
            assert page.tabs.currentWidget() is page.presets
            c = item.data(0, Qt.ItemDataRole.UserRole)
            row = page.presets.row(c.preset) if c.preset else page.presets.rows[-1]
            assert [f.filename for f in row.files] == [c.target.filename, c.draft.filename]
            qtbot.waitUntil(lambda: row.state == "failed", timeout=WAIT)  # noqa: B023 (waited on at once)
            assert "cannot reach the hub" in page.presets.details.text()
            page.tabs.setCurrentWidget(rec)
        assert len(page.presets.rows) == n_rows + 1 and page.presets.rows[-1].kind == "pick"

        # the kind of text: the pairs are ranked again at its prior acceptance
        flat = {c.label: c.acceptance_prior for c in rec.result.recommended}
        before = rec.result
        rec.text_kind.setCurrentIndex(rec.text_kind.findData("creative"))
        assert rec.workload() == "creative"
        qtbot.waitUntil(lambda: rec.result is not before and not page.rank_job.running, timeout=WAIT)
        creative = {c.label: c.acceptance_prior for c in rec.result.recommended}
        both = set(flat) & set(creative)
        assert both and all(creative[k] < flat[k] for k in both)

        # another card: ranked for its memory and speed, said in the budget line and the group's title
        before = rec.result
        rec.machine.setCurrentIndex(rec.machine.findData("RTX 4060 Ti 16GB"))
        assert rec.gpu() == "RTX 4060 Ti 16GB"
        qtbot.waitUntil(lambda: rec.result is not before and not page.rank_job.running, timeout=WAIT)
        assert rec.result.budget.gpus[0].free_bytes == 16 * 2**30
        assert "GPU table" in rec.budget_label.text() and "RTX 4060 Ti" in rec.tree.topLevelItem(0).text(0)
        assert all(c.needed_bytes <= rec.result.budget.free_bytes for c in rec.result.recommended)
        assert "±" in rec.result.recommended[0].speed_text()  # a GPU prediction's held-out band
    finally:
        w.close()
    assert not page.rank_job.running and not page.library.scanning


def test_without_a_gpu_the_budget_is_the_ram(qtbot, make_page):
    page = make_page(nvml=FakeNVML(init_error=NVML_ERROR_DRIVER_NOT_LOADED))
    wait_ranked(qtbot, page)
    rec = page.recommend
    assert rec.result is not None and rec.result.budget.kind == "cpu"
    assert "CPU only" in rec.budget_label.text() and "RAM" in rec.budget_label.text()
    labels = [rec.tree.topLevelItem(0).child(i).text(0) for i in range(rec.tree.topLevelItem(0).childCount())]
    assert labels and "tiny-target F16 + tiny-draft F16" in labels[0]


@pytest.mark.slow
def test_closing_the_window_stops_a_download_and_keeps_its_partial_file(qtbot, tmp_path, hub, places, models):
    # eight copies: a download of about nine seconds, so that the progress the page shows (signals that a
    # loaded machine may deliver late) is never the download's last piece when the window closes
    data = models["T"].read_bytes() * 8
    hub.add(REPO, TARGET, data, throttle_s=0.05)
    w = MainWindow(settings=QSettings(str(tmp_path / "c.ini"), QSettings.Format.IniFormat), nvml=FakeNVML([FakeGpu()]))
    qtbot.addWidget(w)
    w.show()
    w.show_page("Models")
    presets = w.models.presets
    presets.repo_file.setText(f"{REPO}:{TARGET}")
    presets._download_repo_file()
    row = presets.row(f"{REPO}:{TARGET}")
    qtbot.waitUntil(lambda: 0 < row.bar.value() < 1000, timeout=WAIT)
    job = row.job
    w.close()  # the page hears the window close and stops its threads before it returns
    assert not job.running and job.cancel.is_set()
    assert not w.models.library.scanning and not w.models.rank_job.running
    partial = list((places["hf"] / "models--org--Tiny-GGUF" / "blobs").glob("*.incomplete"))
    assert len(partial) == 1 and 0 < partial[0].stat().st_size < len(data)


def test_an_empty_library_leads_somewhere(qtbot, make_page, places):
    """No GGUF anywhere (not even the bundled pair, as in a build that leaves resources/models out): the table
    gives way to the three ways forward, and each one works."""
    page = make_page(sources=[s for s in default_sources() if s.kind != "bundled"])
    library = page.library
    qtbot.waitUntil(lambda: library.library is not None and not library.scanning, timeout=WAIT)
    assert library.table_or_empty.currentWidget() is library.empty
    assert set(library.empty.buttons) == {"Add folder…", "Download a preset", "Use the demo pair"}
    library.empty.buttons["Download a preset"].click()
    assert page.tabs.currentWidget() is page.presets
    library.empty.buttons["Use the demo pair"].click()
    target, draft = page.session.target(), page.session.draft()
    assert target is not None and target.is_file() and draft is not None and draft.is_file()


@pytest.mark.slow
def test_start_page_one_click_downloads_a_recommended_pair_and_runs_it_live(
    qtbot, places, hub, models, tiny_catalog, monkeypatch
):
    """A new user's path end to end, nothing stubbed: the Start page shows the ranking of a catalog whose
    pair lives on the stand-in hub; one Download click fetches both files with progress on the Models
    page (sha256-checked), and the pair goes into the Lab, which measures its baseline and runs live."""
    from app.main_window import MainWindow

    monkeypatch.setenv("SPECTUNE_CACHE_DIR", str(USER_CACHE))  # the engine built there, before HOME moved
    hub.add(REPO, TARGET, models["T"].read_bytes())
    hub.add(REPO, DRAFT, models["D"].read_bytes())
    w = MainWindow(
        settings=QSettings(str(places["home"] / "s.ini"), QSettings.Format.IniFormat), nvml=FakeNVML([FakeGpu()])
    )
    qtbot.addWidget(w)
    w.models._catalog = tiny_catalog  # the shipped catalog's files live on the real hub
    try:
        with qtbot.waitSignal(w.models.ranked, timeout=WAIT):
            w.show()
            w.show_page("Start")
        start = w.start_page
        assert [c.label for c in start.candidates] == ["tiny-target F16 + tiny-draft F16"]
        start.download_buttons()[0].click()
        assert w.current_page() == "Models" and w.models.tabs.currentWidget() is w.models.presets
        lab = w.lab
        qtbot.waitUntil(lambda: lab.live.baseline_tps is not None and lab.live.cycles > 0, timeout=WAIT)
        assert w.current_page() == "Lab"
        assert w.session.target().name == TARGET and w.session.draft().name == DRAFT
        assert w.session.target().read_bytes() == models["T"].read_bytes()
        assert str(places["hf"]) in str(w.session.target()), "downloaded into the Hugging Face cache"
        lab.stop()
        qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)
    finally:
        w.close()
