"""The gpus / inspect / compat / plan subcommands, through a parser of our own (engine.cli.main adds them later)."""

from __future__ import annotations

import argparse
import json

import pytest

from engine.cli.models import register
from engine.models.synthetic import PairSpec, write_pair

from .fake_nvml import NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED, FakeNVML, h100, rtx4090
from .test_gguf_inspect import vocab_dir


def run(args: list[str], capsys, nvml=None) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="spectune")
    sub = parser.add_subparsers(dest="command")
    register(sub, nvml=nvml)
    a = parser.parse_args(args)
    rc = a.func(a)
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc: int, out: str, err: str, *fragments: str) -> None:
    assert rc == 2 and out == ""
    assert err.startswith("spectune: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return write_pair(tmp_path_factory.mktemp("cli_pair"), PairSpec())


def test_register_adds_the_four_subcommands():
    parser = argparse.ArgumentParser(prog="spectune")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    assert {"gpus", "inspect", "compat", "plan"} <= set(sub.choices)


def test_gpus(capsys):
    nvml = FakeNVML([rtx4090(0), h100(1, failing={"nvmlDeviceGetCurrPcieLinkWidth": NVML_ERROR_NOT_SUPPORTED})])
    rc, out, _ = run(["gpus", "--json"], capsys, nvml)
    report = json.loads(out)
    assert rc == 0 and report["status"] == "ok"
    assert [g["llama_name"] for g in report["gpus"]] == ["CUDA0", "CUDA1"]
    # llama.cpp's side, real: the backends this machine loads from the install
    assert report["backends"]["error"] == "" and report["backends"]["devices"][0]["name"] == "CPU"
    assert report["gpus"][1]["pcie_width"] is None and report["cpu"]["logical_cores"] >= 1
    rc, out, _ = run(["gpus"], capsys, nvml)
    assert rc == 0 and "CUDA0  NVIDIA GeForce RTX 4090" in out and "1008 GB/s peak" in out
    assert "llama.cpp backends (" in out and "\n  CPU: " in out
    assert "pcie_width: Not Supported" in out


def test_gpus_without_a_driver_still_reports_the_cpu(capsys):
    rc, out, _ = run(["gpus", "--json"], capsys, FakeNVML(init_error=NVML_ERROR_LIBRARY_NOT_FOUND))
    report = json.loads(out)
    assert rc == 0 and report["status"] == "no_driver" and report["gpus"] == []
    assert report["cpu"]["ram_total_bytes"] > 0
    rc, out, _ = run(["gpus"], capsys)  # the real pynvml on this machine, whatever it has
    assert rc == 0 and "CPU" in out


def test_inspect(capsys, pair):
    target, _ = pair
    rc, out, _ = run(["inspect", str(target), "--json"], capsys)
    info = json.loads(out)
    assert rc == 0 and info["architecture"] == "llama" and info["block_count"] == 4
    assert info["vocab"]["vocab_type"] == "SPM" and set(info["quantization_mix"]) == {"F32"}
    rc, out, _ = run(["inspect", str(target)], capsys)
    assert rc == 0 and "4 layers, n_embd 128" in out and "fingerprint" in out


def test_inspect_errors(capsys, tmp_path, pair):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(pair[0].read_bytes()[:5000])
    assert_one_line_error(*run(["inspect", str(broken)], capsys), "broken.gguf", "claims", "byte offset")
    assert_one_line_error(*run(["inspect", str(tmp_path / "absent.gguf")], capsys), "no such file")
    (tmp_path / "text.gguf").write_text("hello world, not a model")
    assert_one_line_error(*run(["inspect", str(tmp_path / "text.gguf")], capsys), "not a GGUF file")


def test_compat_json_is_exactly_the_verdict(capsys):
    models = vocab_dir()
    rc, out, _ = run(
        ["compat", str(models / "ggml-vocab-llama-spm.gguf"), str(models / "ggml-vocab-phi-3.gguf"), "--json"], capsys
    )
    assert rc == 0 and json.loads(out) == {"compatible": True, "reasons": []}
    rc, out, _ = run(
        [
            "compat",
            str(models / "ggml-vocab-deepseek-coder.gguf"),
            str(models / "ggml-vocab-deepseek-llm.gguf"),
            "--json",
        ],
        capsys,
    )
    verdict = json.loads(out)
    assert rc == 1 and list(verdict) == ["compatible", "reasons"] and verdict["compatible"] is False
    assert verdict["reasons"][0] == "BOS token id differs: target 32013, draft 100000"


def test_compat_human(capsys, tmp_path):
    good = write_pair(tmp_path / "good", PairSpec())
    rc, out, _ = run(["compat", *map(str, good)], capsys)
    assert rc == 0 and out.startswith("compatible: draft.gguf can draft for target.gguf")
    bad = write_pair(tmp_path / "bad", PairSpec(), draft_vocab_variant=1)
    rc, out, _ = run(["compat", *map(str, bad)], capsys)
    assert rc == 1 and out.startswith("not compatible") and "\n  - token text differs" in out
    assert_one_line_error(*run(["compat", str(bad[0]), str(tmp_path / "none.gguf")], capsys), "no such file")


def test_plan(capsys, pair):
    target, draft = pair
    rc, out, _ = run(
        ["plan", "--target", str(target), "--draft", str(draft), "--ctx", "4096", "--vram", "8GiB", "--json"], capsys
    )
    plan = json.loads(out)
    assert rc == 0 and plan["fits"] is True and plan["n_ctx"] == 4096
    assert plan["gpus"] == [
        {
            "name": "CUDA0",
            "free_bytes": 8 * 2**30,
            "planned_bytes": plan["totals"]["vram_bytes"],
            "headroom_bytes": 8 * 2**30 - plan["totals"]["vram_bytes"],
        }
    ]
    assert {i["model"] for i in plan["items"]} == {"target", "draft"}
    rc, out, _ = run(
        [
            "plan",
            "--target",
            str(target),
            "--ctx",
            "8192",
            "--vram",
            "1M",
            "--ngl",
            "2",
            "--cache-type-k",
            "q8_0",
            "--cache-type-v",
            "q4_0",
        ],
        capsys,
    )
    assert (
        rc == 0
        and "does NOT fit" in out
        and "layers 3 on CPU, 1 on CUDA0; output layer on CUDA0" in out
        and "K q8_0 + V q4_0" in out
    )
    # no --vram: the GPUs NVML reports; with none, a CPU-only plan
    rc, out, _ = run(
        ["plan", "--target", str(target), "--ctx", "512", "--json"],
        capsys,
        FakeNVML(init_error=NVML_ERROR_LIBRARY_NOT_FOUND),
    )
    plan = json.loads(out)
    assert rc == 0 and plan["fits"] is None
    # ... which gets the Lab's verdict against the available RAM
    assert plan["fit"]["where"] == "RAM" and plan["fit"]["needed_bytes"] == plan["totals"]["all_bytes"]
    assert plan["fit"]["fits"] is (plan["fit"]["needed_bytes"] <= plan["fit"]["available_bytes"])
    rc, out, _ = run(["plan", "--target", str(target), "--ctx", "512", "--json"], capsys, FakeNVML([h100()]))
    plan = json.loads(out)
    assert plan["gpus"][0]["free_bytes"] == 80 * 2**30 - 512 * 2**20
    assert plan["fit"] == {
        "fits": True,
        "where": "VRAM",
        "needed_bytes": plan["totals"]["vram_bytes"],
        "available_bytes": 80 * 2**30 - 512 * 2**20,
    }
    rc, out, _ = run(["plan", "--target", str(target), "--ctx", "512", "--vram", "1M"], capsys)
    assert "This pair does not fit on CUDA0" in out and "smaller context than 512" in out


def test_plan_errors(capsys, pair, tmp_path):
    target, _ = pair
    assert_one_line_error(
        *run(["plan", "--target", str(target), "--ctx", "512", "--vram", "lots"], capsys), "cannot read the size 'lots'"
    )
    assert_one_line_error(*run(["plan", "--target", str(tmp_path / "x.gguf"), "--ctx", "512"], capsys), "no such file")
    vocab_only = vocab_dir() / "ggml-vocab-llama-spm.gguf"
    assert_one_line_error(
        *run(["plan", "--target", str(vocab_only), "--ctx", "512", "--vram", "8G"], capsys), "holds no tensors"
    )
    assert_one_line_error(
        *run(["plan", "--target", str(target), "--ctx", "-5", "--vram", "8G"], capsys), "--ctx must be 0"
    )
