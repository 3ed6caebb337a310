"""The local library on fake Hugging Face / LM Studio / llama.cpp / Ollama trees of generated GGUFs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from engine.cli.library import register
from engine.models import library
from engine.models.demo_models import MODELS_DIR as BUNDLED_DIR
from engine.models.demo_models import list_demo_models
from engine.models.library import (
    LibraryError,
    Source,
    add_folder,
    default_sources,
    format_library,
    remove_folder,
    scan,
    user_folders,
)
from engine.models.synthetic import PairSpec, write_pair
from testmodels.heads import write_dflash_draft, write_eagle3_draft, write_mtp_model

from .conftest import run_registered

COMMIT = "a" * 40
OLD_COMMIT = "b" * 40


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """T: a target, D: its draft, B: a draft with a vocabulary llama.cpp refuses for T (same size as D)."""
    t, d = write_pair(tmp_path_factory.mktemp("lib_pair"), PairSpec())
    _, b = write_pair(tmp_path_factory.mktemp("lib_bad"), PairSpec(), draft_vocab_variant=1)
    return {"T": t, "D": d, "B": b}


def put(path: Path, src: Path | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(src, bytes):
        path.write_bytes(src)
    else:
        shutil.copyfile(src, path)
    return path


def hf_file(cache: Path, repo: str, filename: str, src: Path, commits=(COMMIT,)) -> Path:
    """The layout huggingface_hub writes: blobs/<sha256>, snapshots/<commit>/<file> -> ../../blobs/<sha256>."""
    storage = cache / f"models--{repo.replace('/', '--')}"
    data = src.read_bytes()
    blob = put(storage / "blobs" / hashlib.sha256(data).hexdigest(), data)
    for commit in commits:
        link = storage / "snapshots" / commit / filename
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    put(storage / "refs" / "main", commits[0].encode())
    return storage / "snapshots" / commits[0] / filename


def ollama_model(root: Path, name_parts: tuple[str, ...], src: Path | None, digest: str | None = None) -> Path:
    """manifests/HOST/NAMESPACE/MODEL/TAG naming blobs/sha256-HEX, as Ollama stores a pulled model."""
    if src is not None:
        data = src.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        put(root / "blobs" / f"sha256-{digest}", data)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "digest": "sha256:" + "c" * 64,
            "size": 485,
        },
        "layers": [
            {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": 1},
            {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "d" * 64, "size": 10},
            {"mediaType": "application/vnd.ollama.image.params", "digest": "sha256:" + "e" * 64, "size": 10},
        ],
    }
    return put(root / "manifests" / Path(*name_parts), json.dumps(manifest).encode())


@pytest.fixture
def machine(tmp_path, models) -> dict[str, Path]:
    """A home folder with every kind of place filled, and the paths the tests expect to see."""
    home = tmp_path / "home"
    hf = home / ".cache" / "huggingface" / "hub"
    lms = home / ".lmstudio" / "models"
    ollama = home / ".ollama" / "models"
    llama = tmp_path / "llama-cache"
    user = tmp_path / "my-models"
    p: dict[str, Path] = {"home": home, "hf": hf, "lms": lms, "ollama": ollama, "llama": llama, "user": user}

    # Hugging Face: the target, linked from two snapshots (listed once); a link whose blob is gone; a partial blob
    p["hf_T"] = hf_file(hf, "org/Tiny-GGUF", "tiny-target-F32.gguf", models["T"], commits=(COMMIT, OLD_COMMIT))
    gone = hf / "models--org--Gone-GGUF" / "snapshots" / COMMIT / "gone.gguf"
    gone.parent.mkdir(parents=True)
    os.symlink("../../blobs/" + "f" * 64, gone)
    put(hf / "models--org--Tiny-GGUF" / "blobs" / ("9" * 64 + ".incomplete"), b"GGUF partial")

    # LM Studio: the draft, a broken file, a complete and an incomplete split model, a partial download
    p["lms_D"] = put(lms / "pub" / "Tiny-GGUF" / "tiny-draft-F32.gguf", models["D"])
    p["lms_broken"] = put(lms / "pub" / "Tiny-GGUF" / "broken.gguf", b"GGUF" + b"\xff" * 40)
    put(lms / "pub" / "Tiny-GGUF" / "tiny-draft-F32.gguf.incomplete", b"GGUF")
    p["split"] = put(lms / "pub" / "Split-GGUF" / "big-Q8_0-00001-of-00002.gguf", models["B"])
    put(lms / "pub" / "Split-GGUF" / "big-Q8_0-00002-of-00002.gguf", b"\0" * 1000)
    p["gap"] = put(lms / "pub" / "Split-GGUF" / "gap-00001-of-00003.gguf", models["B"])
    put(lms / "pub" / "Split-GGUF" / "gap-00003-of-00003.gguf", b"\0" * 10)

    # Ollama: the draft under two tags, B from another registry, a missing blob, a broken manifest
    ollama_model(ollama, ("registry.ollama.ai", "library", "tiny", "latest"), models["D"])
    ollama_model(ollama, ("registry.ollama.ai", "library", "tiny", "q8"), models["D"])
    ollama_model(ollama, ("hf.co", "org", "Bad-GGUF", "F32"), models["B"])
    ollama_model(ollama, ("registry.ollama.ai", "library", "gone", "latest"), None, digest="7" * 64)
    put(ollama / "manifests" / "registry.ollama.ai" / "library" / "bad" / "latest", b"{not json")
    p["ollama_D"] = ollama / "blobs" / f"sha256-{hashlib.sha256(models['D'].read_bytes()).hexdigest()}"

    # llama.cpp's cache: a flat copy of the target next to its etag file
    p["llama_T"] = put(llama / "org_Tiny-GGUF_tiny-target-F32.gguf", models["T"])
    put(llama / "org_Tiny-GGUF_tiny-target-F32.gguf.json", b'{"etag": "x"}')

    # a user's folder: a link to a file already found (listed once) and a hidden folder (skipped)
    user.mkdir()
    os.symlink(p["lms_D"], user / "linked-draft.gguf")
    put(user / ".cache" / "hidden.gguf", models["D"])
    return p


def sources_of(m: dict[str, Path]) -> list[Source]:
    return [
        Source("huggingface", m["hf"]),
        Source("lmstudio", m["lms"]),
        Source("llama.cpp", m["llama"]),
        Source("ollama", m["ollama"]),
        Source("user", m["user"]),
    ]


def by_path(lib) -> dict[str, library.LocalModel]:
    return {m.path: m for m in lib.models}


def test_scan_finds_every_kind_of_place(machine):
    lib = scan(sources_of(machine))
    found = by_path(lib)
    names = {m.name: m for m in lib.models}

    t = found[str(machine["hf_T"])]
    assert (t.name, t.source, t.repo) == ("org/Tiny-GGUF:tiny-target-F32.gguf", "huggingface", "org/Tiny-GGUF")
    assert (t.architecture, t.quant, t.error) == ("llama", "F32", None)
    assert t.family == "spectune-synthetic-target" and t.size_bytes == machine["hf_T"].stat().st_size

    d = found[str(machine["lms_D"])]
    assert (d.name, d.source) == ("pub/Tiny-GGUF/tiny-draft-F32.gguf", "lmstudio")
    assert d.parameter_count < t.parameter_count and d.vocab_fingerprint == t.vocab_fingerprint

    tiny = found[str(machine["ollama_D"])]
    assert (tiny.name, tiny.aliases, tiny.source) == ("tiny:latest", ["tiny:q8"], "ollama")
    assert names["hf.co/org/Bad-GGUF:F32"].error is None
    assert found[str(machine["llama_T"])].source == "llama.cpp"


def test_split_partial_broken_and_duplicate_files_are_handled(machine, models):
    lib = scan(sources_of(machine))
    found = by_path(lib)
    paths = set(found)

    split = found[str(machine["split"])]
    assert split.split_parts == 2 and split.error is None
    assert split.size_bytes == models["B"].stat().st_size + 1000
    assert not any("00002-of-00002" in p for p in paths)
    gap = found[str(machine["gap"])]
    assert gap.error == "split model is incomplete: part 2 of 3 missing" and gap.split_parts == 3

    assert "broken.gguf: unsupported GGUF version" in found[str(machine["lms_broken"])].error
    assert not any(p.endswith(".incomplete") or "gone.gguf" in p or "hidden" in p for p in paths)
    # the target is linked from two snapshots, the draft is reached again through a user's link: once each
    assert sum("tiny-target-F32.gguf" in p and "snapshots" in p for p in paths) == 1
    assert not any("linked-draft" in p for p in paths)
    ollama_errors = {m.name: m.error for m in lib.models if m.source == "ollama" and m.error}
    assert "blob sha256-7777" in ollama_errors["gone:latest"] and "is missing" in ollama_errors["gone:latest"]
    assert "cannot be read" in ollama_errors["bad:latest"]
    counts = {s["kind"]: s["files"] for s in lib.sources}
    assert counts == {"huggingface": 1, "lmstudio": 4, "llama.cpp": 1, "ollama": 4, "user": 0}


def test_pairs_follow_llama_cpps_rule_and_put_the_smaller_model_as_draft(machine):
    lib = scan(sources_of(machine))
    pairs = {(Path(p["target"]), Path(p["draft"])) for p in lib.pairs}
    targets = {machine["hf_T"], machine["llama_T"]}
    drafts = {machine["lms_D"], machine["ollama_D"]}
    assert pairs == {(t, d) for t in targets for d in drafts}
    found = by_path(lib)
    # same model twice (equal size) is compatible but not a pair; B's vocabulary pairs with nothing of T's
    assert str(machine["llama_T"]) in found[str(machine["hf_T"])].compatible_with
    split = found[str(machine["split"])]
    assert split.compatible_with and all("Bad-GGUF" in p or "sha256-" in p for p in split.compatible_with)
    assert str(machine["split"]) not in found[str(machine["hf_T"])].compatible_with


def test_each_file_is_read_once_and_the_rule_runs_once_per_pair_of_vocabularies(machine, monkeypatch):
    inspected, compared = [], []
    real_inspect, real_compat = library.inspect_gguf, library.vocab_compatibility
    monkeypatch.setattr(library, "inspect_gguf", lambda path, **kw: inspected.append(path) or real_inspect(path, **kw))
    monkeypatch.setattr(library, "vocab_compatibility", lambda a, b: compared.append(1) or real_compat(a, b))
    lib = scan(sources_of(machine), cache=None)
    # ten entries; the incomplete split and the two broken Ollama models are not opened
    assert len(lib.models) == 10
    assert len(inspected) == len(set(map(str, inspected))) == 7
    assert len(compared) == 1  # two vocabularies (T's and B's), one comparison


def test_a_rescan_of_an_unchanged_library_opens_no_file(machine, models, tmp_path, monkeypatch):
    cache = tmp_path / "scan-cache.json"
    first = scan(sources_of(machine), cache=cache)
    inspected, compared = [], []
    real_inspect, real_compat = library.inspect_gguf, library.vocab_compatibility
    monkeypatch.setattr(library, "inspect_gguf", lambda path, **kw: inspected.append(path) or real_inspect(path, **kw))
    monkeypatch.setattr(library, "vocab_compatibility", lambda a, b: compared.append(1) or real_compat(a, b))
    again = scan(sources_of(machine), cache=cache)
    assert again.to_dict() == first.to_dict()
    assert inspected == [] and compared == []

    # without the cached verdict, one file per vocabulary is read to compare them, no more
    data = json.loads(cache.read_text())
    data["verdicts"] = {}
    cache.write_text(json.dumps(data))
    assert scan(sources_of(machine), cache=cache).to_dict() == first.to_dict()
    assert len(inspected) == 2 and len(compared) == 1

    # a changed file is read again
    inspected.clear()
    put(machine["lms_D"], models["B"])
    changed = scan(sources_of(machine), cache=cache)
    assert inspected == [machine["lms_D"]] and len(changed.pairs) == 2
    put(machine["lms_D"], b"GGUF garbage")
    assert "unsupported GGUF version" in by_path(scan(sources_of(machine), cache=cache))[str(machine["lms_D"])].error

    # a damaged cache file is ignored, never fatal
    cache.write_text("{not json")
    assert len(scan(sources_of(machine), cache=cache).models) == 10


def test_a_file_that_breaks_the_inspector_is_listed_with_its_error(machine, monkeypatch):
    real = library.inspect_gguf

    def flaky(path, **kw):
        if "tiny-draft" in str(path):
            raise RuntimeError("unexpected")
        return real(path)

    monkeypatch.setattr(library, "inspect_gguf", flaky)
    lib = scan(sources_of(machine))
    assert by_path(lib)[str(machine["lms_D"])].error == "unexpected"


def test_default_sources_follow_the_environment(tmp_path):
    home = tmp_path / "home"
    store = tmp_path / "data" / "library.json"
    plain = default_sources(env={}, home=home, store=store)
    if os.name == "posix" and not os.uname().sysname == "Darwin":
        assert [(s.kind, s.path) for s in plain] == [
            ("huggingface", home / ".cache" / "huggingface" / "hub"),
            ("lmstudio", home / ".lmstudio" / "models"),
            ("lmstudio", home / ".cache" / "lm-studio" / "models"),
            ("llama.cpp", home / ".cache" / "llama.cpp"),
            ("ollama", home / ".ollama" / "models"),
            ("bundled", BUNDLED_DIR),
        ]
    env = {
        "HF_HOME": str(tmp_path / "hfhome"),
        "LLAMA_CACHE": str(tmp_path / "lc"),
        "OLLAMA_MODELS": str(tmp_path / "om"),
    }
    kinds = {s.kind: s.path for s in default_sources(env=env, home=home, store=store)}
    assert kinds["huggingface"] == tmp_path / "hfhome" / "hub"
    assert (kinds["llama.cpp"], kinds["ollama"]) == (tmp_path / "lc", tmp_path / "om")
    env["HF_HUB_CACHE"] = str(tmp_path / "hub")
    assert default_sources(env=env, home=home, store=store)[0].path == tmp_path / "hub"
    # a folder that is also a default place is listed once
    (tmp_path / "om").mkdir()
    add_folder(tmp_path / "om", store=store)
    assert sum(s.path.resolve() == (tmp_path / "om").resolve() for s in default_sources(env, home, store)) == 1


def test_user_folders_are_kept_in_the_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_DATA_DIR", str(tmp_path / "data"))
    folder = tmp_path / "mine"
    folder.mkdir()
    assert user_folders() == []
    assert add_folder(folder) == folder.resolve()
    add_folder(folder)
    assert user_folders() == [folder.resolve()]
    assert json.loads((tmp_path / "data" / "library.json").read_text()) == {"folders": [str(folder.resolve())]}
    with pytest.raises(LibraryError, match="is not a folder"):
        add_folder(tmp_path / "nope")
    remove_folder(folder)
    assert user_folders() == []
    with pytest.raises(LibraryError, match="not in the library's folders"):
        remove_folder(folder)
    (tmp_path / "data" / "library.json").write_text("{broken")
    with pytest.raises(LibraryError, match="cannot be read"):
        user_folders()


def test_the_bundled_demo_pair_is_in_the_library(tmp_path):
    """What SpecTune ships is listed, as "bundled", with its pairs, on a machine with no other model."""
    lib = scan(default_sources(env={}, home=tmp_path / "empty-home", store=tmp_path / "library.json"), cache=None)
    shipped = {str(m.path) for m in list_demo_models() if m.exists}
    assert shipped, "the checkout holds the demo pair (resources/models)"
    assert {m.path for m in lib.models} == shipped and {m.source for m in lib.models} == {"bundled"}
    assert next(s for s in lib.sources if s["kind"] == "bundled")["files"] == len(shipped)
    assert {(p["target_name"], p["draft_name"]) for p in lib.pairs} >= {
        ("spectune-demo-target-f16.gguf", "spectune-demo-draft-f16.gguf")
    }


def test_draft_heads_are_listed_as_such_and_pair_with_nothing(tmp_path, models):
    folder = tmp_path / "heads"
    put(folder / "target.gguf", models["T"])
    put(folder / "draft.gguf", models["D"])
    write_eagle3_draft(folder / "eagle3.gguf")
    write_dflash_draft(folder / "dflash.gguf")
    write_dflash_draft(folder / "dspark.gguf", dspark=True)
    write_mtp_model(folder / "glm-mtp.gguf")
    lib = scan([Source("user", folder)], cache=None)
    kinds = {m.name: m.kind for m in lib.models}
    assert kinds == {
        "target.gguf": None,
        "draft.gguf": None,
        "eagle3.gguf": "EAGLE-3 draft (speculates only with draft-eagle3)",
        "dflash.gguf": "DFlash draft (speculates only with draft-dflash)",
        "dspark.gguf": "DSpark draft (speculates only with draft-dspark)",
        "glm-mtp.gguf": "has an MTP head — no separate draft needed (draft-mtp)",
    }
    # the heads share the target's vocabulary, yet no head is a plain draft; the MTP model pairs as a model
    heads = {str(folder / f) for f in ("eagle3.gguf", "dflash.gguf", "dspark.gguf")}
    assert not any(p["draft"] in heads or p["target"] in heads for p in lib.pairs)
    assert any("glm-mtp.gguf" in (p["target_name"], p["draft_name"]) for p in lib.pairs)
    assert lib.to_dict()["models"][2]["kind"] == kinds[lib.models[2].name]
    text = format_library(lib)
    assert "      EAGLE-3 draft (speculates only with draft-eagle3)" in text


def test_missing_places_are_reported_not_fatal(tmp_path):
    lib = scan([Source("lmstudio", tmp_path / "absent"), Source("ollama", tmp_path / "absent2")])
    assert lib.models == [] and lib.pairs == []
    assert [s["exists"] for s in lib.sources] == [False, False]


# -- the command line -------------------------------------------------------------------------------


def run_cli(args: list[str], capsys, **register_kw) -> tuple[int, str, str]:
    return run_registered(register, args, capsys, **register_kw)


def test_cli_models_json_and_text(machine, capsys):
    rc, out, _ = run_cli(["models", "--json"], capsys, sources=sources_of(machine))
    d = json.loads(out)
    assert rc == 0 and len(d["pairs"]) == 4 and {s["kind"] for s in d["sources"]} >= {"huggingface", "ollama"}
    rc, out, _ = run_cli(["models"], capsys, sources=sources_of(machine))
    assert rc == 0 and "compatible pairs (4):" in out and "also: tiny:q8" in out and "error: split model" in out


def test_spectune_models_add_and_remove_through_the_real_command_line(machine, tmp_path, monkeypatch, capsys):
    from engine.cli.main import main

    monkeypatch.setenv("HOME", str(machine["home"]))
    monkeypatch.setenv("SPECTUNE_DATA_DIR", str(tmp_path / "data"))
    for var in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME", "OLLAMA_MODELS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LLAMA_CACHE", str(machine["llama"]))
    extra = put(tmp_path / "extra" / "sub" / "extra-draft.gguf", machine["lms_D"])

    assert main(["models", "--json", "--add", str(tmp_path / "extra")]) == 0
    out, err = capsys.readouterr()
    d = json.loads(out)
    assert "added" in err and str(extra) in {m["path"] for m in d["models"]}
    assert {m["source"] for m in d["models"]} == {"huggingface", "lmstudio", "llama.cpp", "ollama", "user", "bundled"}
    assert main(["models", "--json", "--remove", str(tmp_path / "extra")]) == 0
    assert str(extra) not in {m["path"] for m in json.loads(capsys.readouterr()[0])["models"]}

    for args, fragment in (
        (["models", "--add", str(tmp_path / "nope")], "is not a folder"),
        (["models", "--remove", str(tmp_path / "nope")], "not in the library's folders"),
    ):
        assert main(args) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("spectune: error: ") and err.count("\n") == 1 and fragment in err
