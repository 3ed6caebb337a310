"""The documentation holds together (issue 50): every relative link and picture in the README, docs/*.md and
bench/README.md points at a file that exists (and at a heading that exists, where it names one), the README
links every page of docs/ and stays short, and the pictures scripts/docs_screenshots.py has the app write are
the ones the docs link."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from engine.core.paths import REPO_ROOT

ROOT = REPO_ROOT
README = ROOT / "README.md"
README_LIMIT = 12288  # bytes: the README is the one screen a newcomer reads; the rest lives in docs/
DOC_PAGES = sorted((ROOT / "docs").glob("*.md"))
DOCS = [README, *DOC_PAGES, ROOT / "bench" / "README.md"]

FENCE = re.compile(r"^```.*?^```[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target), with an optional "title"; the text may hold one level of [..]
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def prose(text: str) -> str:
    """The text with code blocks and code spans taken out: a link is never written inside code."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    return LINK.findall(prose(text))


def local_links(text: str) -> list[str]:
    """The links that point into the repository: not http(s), mail or a bare #anchor."""
    return [t for t in links(text) if not re.match(r"^(https?:|mailto:|#)", t)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors on its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8")))}


def broken_links(doc: Path) -> list[str]:
    """Each local link of ``doc`` whose file, or whose heading in a markdown file, does not exist."""
    broken = []
    for target in local_links(doc.read_text(encoding="utf-8")):
        path, _, fragment = target.partition("#")
        resolved = (doc.parent / path).resolve()
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target} (no such heading in {resolved.name})")
    return broken


def same_file_anchor_links(doc: Path) -> list[str]:
    """Bare #anchor links whose heading is not in ``doc`` itself."""
    known = anchors(doc)
    return [t for t in links(doc.read_text(encoding="utf-8")) if t.startswith("#") and t[1:] not in known]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_picture_resolves(doc: Path):
    assert doc.is_file(), f"{doc.relative_to(ROOT)} is missing"
    broken = broken_links(doc) + same_file_anchor_links(doc)
    assert not broken, f"{doc.relative_to(ROOT)} links to what does not exist: {broken}"


def test_the_link_check_finds_links_and_reports_a_broken_one(tmp_path: Path):
    """The check is not vacuous: it sees links outside code, ignores those in code, and names a missing file
    and a missing heading."""
    (tmp_path / "there.md").write_text("# A heading, with `code`\n\ntext\n", encoding="utf-8")
    (tmp_path / "pic.png").write_bytes(b"")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](there.md) ![pic](pic.png) [anchor](there.md#a-heading-with-code) [web](https://example.com)\n"
        "[gone](missing.md) [bad anchor](there.md#nowhere) `[in code](nope.md)`\n"
        "```\n[in a block](nope2.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(doc) == ["missing.md (no such file)", "there.md#nowhere (no such heading in there.md)"]
    assert len(local_links(README.read_text(encoding="utf-8"))) >= len(DOC_PAGES)


def test_the_readme_links_every_page_of_docs():
    assert DOC_PAGES, "docs/ holds no pages"
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in local_links(README.read_text(encoding="utf-8"))}
    missing = [p.name for p in DOC_PAGES if p.resolve() not in linked]
    assert not missing, f"README.md does not link docs/{missing}"


def test_the_readme_fits_its_budget():
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes, over {README_LIMIT}: move detail into docs/"


def test_the_readme_keeps_the_two_commands_at_the_top():
    first_block = FENCE.search(README.read_text(encoding="utf-8"))
    assert first_block is not None
    assert "bash scripts/run.sh" in first_block.group(0) and "bash scripts/test.sh" in first_block.group(0)


# -- the screenshots ---------------------------------------------------------------------------------------


def screenshot_script():
    spec = importlib.util.spec_from_file_location("docs_screenshots", ROOT / "scripts" / "docs_screenshots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_names_the_pictures_as_the_app_writes_them():
    """app/scripted.py saves page i of the page list as ``{i}-{name.lower()}.png``; the script's PICTURES say
    the same, so a change to either side fails here rather than leaving the docs linking stale names."""
    from app.page_list import PAGE_NAMES

    source = (ROOT / "app" / "scripted.py").read_text(encoding="utf-8")
    assert re.search(r'f"\{i\}-\{name\.lower\(\)\}\.png"', source), "app/scripted.py names its pictures otherwise"
    assert re.search(r"name = PAGE_NAMES\[i\]", source), "app/scripted.py no longer walks the page list in order"
    pictures = screenshot_script().PICTURES
    assert pictures == tuple(f"{i}-{n.lower()}.png" for i, n in enumerate(PAGE_NAMES))
    assert len(pictures) == len(PAGE_NAMES) == 8


def linked_pictures() -> dict[Path, list[str]]:
    """docs/ pictures by the doc that links them (light ones in docs/, dark ones in docs/dark/)."""
    found: dict[Path, list[str]] = {}
    folders = {(ROOT / "docs").resolve(), (ROOT / "docs" / "dark").resolve()}
    for doc in DOCS:
        for target in local_links(doc.read_text(encoding="utf-8")):
            path = (doc.parent / target.partition("#")[0]).resolve()
            if path.suffix == ".png" and path.parent in folders:
                found.setdefault(doc, []).append(path.name)
    return found


def test_the_docs_link_only_pictures_the_script_writes():
    pictures = set(screenshot_script().PICTURES)
    linked = linked_pictures()
    assert linked, "no doc links a screenshot"
    stray = {str(doc.relative_to(ROOT)): sorted(set(names) - pictures) for doc, names in linked.items()}
    stray = {doc: names for doc, names in stray.items() if names}
    assert not stray, f"docs link pictures the screenshot script does not write: {stray}"


def test_the_pictures_in_docs_are_the_ones_the_script_writes():
    """Every page has its light picture, and no picture in docs/ or docs/dark/ has a name the script would
    not write again (a stale name would survive the next run beside the new one)."""
    pictures = set(screenshot_script().PICTURES)
    light = {p.name for p in (ROOT / "docs").glob("*.png")}
    dark = {p.name for p in (ROOT / "docs" / "dark").glob("*.png")}
    assert pictures <= light, f"docs/ lacks {sorted(pictures - light)}"
    assert light <= pictures, f"docs/ holds pictures the script does not write: {sorted(light - pictures)}"
    assert dark <= pictures, f"docs/dark/ holds pictures the script does not write: {sorted(dark - pictures)}"
