"""The Lab offers only the methods a pair can run, and the Models page names draft heads, under the offscreen
platform with the real engine worker and generated models of each kind (testmodels.heads)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from app.engine_controller import READY  # noqa: E402
from engine.models.draft_heads import pair_verdicts  # noqa: E402
from engine.models.library import Source  # noqa: E402
from testmodels.heads import write_dflash_draft, write_eagle3_draft, write_mtp_model  # noqa: E402

from .conftest import GUI_WAIT, PROMPTS  # noqa: E402

pytestmark = pytest.mark.slow  # every test here starts the engine worker or llama-server


@pytest.fixture(scope="module")
def heads(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("gui_heads")
    return {
        "mtp": write_mtp_model(out / "glm-mtp.gguf"),
        "eagle3": write_eagle3_draft(out / "eagle3.gguf"),
        "dflash": write_dflash_draft(out / "dflash.gguf"),
    }


def offered(controls) -> dict[str, tuple[bool, str]]:
    """The method list as the user sees it: each entry's text -> (can be chosen, its tooltip)."""
    model = controls.method.model()
    return {
        controls.method.itemText(row): (model.item(row).isEnabled(), model.item(row).toolTip())
        for row in range(controls.method.count())
    }


def test_the_lab_offers_only_the_methods_the_pair_can_run(qtbot, window, pair, heads):
    lab, c = window.lab, window.lab.controls
    target, draft = pair
    c.method.setCurrentIndex(c.method.findText("draft-eagle3"))
    c.method.setEditText("ngram-mod,ngram-simple")  # then typed over: a setting that is no entry of the list

    lab.session.set_pair(target, draft)
    assert c.method.currentText() == "ngram-mod,ngram-simple"  # greying entries out leaves the choice alone
    items = offered(c)
    assert items["draft-simple"] == (True, "") and items["ngram-mod,draft-simple"] == (True, "")
    assert items["ngram-mod"] == (True, "") and items["none"] == (True, "")
    assert items["draft-eagle3"] == (False, "draft-eagle3 needs an EAGLE-3 draft file; the draft is an ordinary model")
    assert items["draft-mtp"] == (False, "draft-mtp needs a target with an MTP head; this model has none")
    assert items["draft-dflash"] == (False, "draft-dflash needs a DFlash draft file; the draft is an ordinary model")

    lab.session.set_pair(target, heads["eagle3"])
    items = offered(c)
    assert items["draft-eagle3"] == (True, "")
    assert items["draft-simple"][0] is False and "(use draft-eagle3)" in items["draft-simple"][1]

    # a model with an MTP head and no draft: draft-mtp, and nothing that needs a draft model
    lab.session.set_pair(heads["mtp"], None)
    items = offered(c)
    assert items["draft-mtp"] == (True, "")
    assert items["draft-simple"] == (False, "draft-simple needs a draft model")
    assert items["ngram-simple,draft-simple"] == (False, "draft-simple needs a draft model")
    # every entry agrees with the engine's own verdicts
    verdicts = pair_verdicts(heads["mtp"], None)
    assert all(items[m][0] == verdicts[m].runs for m in verdicts if m in items)


def test_a_method_the_pair_cannot_run_is_refused_with_its_reason_and_draft_mtp_runs(qtbot, window, heads):
    lab, c = window.lab, window.lab.controls
    lab.session.set_pair(heads["mtp"], None)
    c.ctx.setValue(512)
    c.threads.setValue(1)
    c.temp.setValue(0.0)
    c.k.setValue(3)
    c.workload.setCurrentText("custom prompt")
    c.prompt.setPlainText(PROMPTS[1])
    c.max_tokens.setValue(48)

    # the list is editable: a disabled method can still be typed, and is then explained and refused
    c.method.setCurrentText("draft-simple")
    assert not c.method_note.isHidden() and "draft-simple needs a draft model" in c.method_note.text()
    lab.start()
    assert lab.mode == "idle" and "draft-simple needs a draft model" in lab.banner.label.text()
    assert window.controller.state == READY

    c.method.setCurrentText("draft-mtp")
    assert c.method_note.isHidden()
    finished = []
    lab.runFinished.connect(finished.append)
    lab.start()
    qtbot.waitUntil(lambda: len(finished) >= 1, timeout=GUI_WAIT)
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=GUI_WAIT)
    summary = finished[0]["summary"]
    assert finished[0]["spec"]["spec_type"] == "draft-mtp" and summary["drafted"] > 0
    assert summary["accepted"] == summary["drafted"]  # the generated head predicts what the target does
    assert window.controller.state == READY


def test_the_models_page_names_draft_heads_and_lists_the_bundled_pair(qtbot, window, pair, heads, tmp_path):
    from engine.models.library import default_sources

    folder = tmp_path / "mine"
    folder.mkdir()
    for path in (*heads.values(), *pair):
        (folder / f"{path.parent.name}-{path.name}").symlink_to(path)
    page = window.models
    sources = [Source("user", folder), *(s for s in default_sources(env={}, home=tmp_path) if s.kind == "bundled")]
    page.library.sources = sources
    page.library.rescan()  # after a scan the window may have started of its own (the Start page ranks pairs)

    def scanned_mine() -> bool:
        lib = page.library.library
        return not page.library.scanning and lib is not None and str(folder) in {s["path"] for s in lib.sources}

    qtbot.waitUntil(scanned_mine, timeout=GUI_WAIT)
    table = page.library.table
    rows = {
        table.item(r, 0).text(): (table.item(r, 1).text(), table.item(r, 3).text()) for r in range(table.rowCount())
    }
    eagle3 = next(name for name in rows if name.endswith("eagle3.gguf"))
    mtp = next(name for name in rows if name.endswith("glm-mtp.gguf"))
    assert rows[eagle3][1].startswith("eagle3 · ") and "EAGLE-3 draft" in rows[eagle3][1]
    assert "has an MTP head — no separate draft needed" in rows[mtp][1]
    bundled = {name: where for name, (where, _) in rows.items() if where == "bundled"}
    assert "spectune-demo-target-f16.gguf" in bundled and "spectune-demo-draft-f16.gguf" in bundled
    assert "bundled 4" in page.library.status.text()
    # no pair has a head in it
    pairs = page.library.pairs
    names = {pairs.item(r, c).text() for r in range(pairs.rowCount()) for c in (0, 1)}
    assert eagle3 not in names and not any(n.endswith("dflash.gguf") for n in names)

    # one head selected: it is named, and "Use in Lab" makes it the draft, not the target
    window.lab.session.set_pair(pair[0], None)
    page.library.select_paths(str(folder / eagle3))
    assert "EAGLE-3 draft" in page.library.selection_label.text()
    page.library.use_button.click()
    assert window.lab.session.draft() == folder / eagle3 and window.lab.session.target() == pair[0]
    qtbot.waitUntil(lambda: "draft-eagle3" in page.methods_badge.text(), timeout=30_000)  # checked in a thread
    assert "draft-simple" not in page.methods_badge.text()
    assert window.lab.controls.method.model().item(window.lab.controls.method.findText("draft-eagle3")).isEnabled()


def test_a_new_pair_that_cannot_run_the_method_set_gets_one_it_can_and_the_note_says_why(qtbot, window, pair, heads):
    """A newcomer picks a Qwen3.5-style target with its own MTP head and no draft while draft-simple is set:
    the Lab moves to draft-mtp and says why; an EAGLE-3 draft file then gets draft-eagle3; a method the user
    then chooses is kept, and the note goes."""
    lab, c = window.lab, window.lab.controls
    c.method.setCurrentText("draft-simple")
    lab.session.set_pair(heads["mtp"], None)
    assert c.method.currentText() == "draft-mtp"
    assert not c.method_note.isHidden()
    assert c.method_note.text() == "draft-mtp chosen for this pair: draft-simple needs a draft model"
    lab.session.set_pair(pair[0], heads["eagle3"])
    assert c.method.currentText() == "draft-eagle3" and "draft-eagle3 chosen for this pair" in c.method_note.text()
    c.method.setCurrentText("ngram-mod")
    assert c.method_note.isHidden()
    lab.session.set_pair(*pair)  # ngram-mod runs on any pair: the user's choice stays
    assert c.method.currentText() == "ngram-mod" and c.method_note.isHidden()
