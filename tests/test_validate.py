"""Validation: the exported command served by the bundled llama-server against the lab,
on a synthetic pair; at temperature 0 both must draft and accept exactly the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.llama.server import TERMINATE_GRACE_S, parse_metrics
from engine.measure.validate import (
    StopSwitch,
    ValidateCancelled,
    ValidateError,
    _fits_beside,
    _offloads,
    format_report,
    load_prompts,
    validate,
)
from engine.models.demo_models import demo_pair

from .conftest import PROMPTS

pytestmark = pytest.mark.server


def test_validate_agrees_with_the_lab_at_temperature_0(pair):
    target, draft = pair
    report = validate(
        LoadSettings(target, draft, ctx=2048),
        SpecSettings("draft-simple", draft_n_max=4),
        SamplingSettings(temp=0.0),
        list(PROMPTS[1:3]),
        64,
    )
    lab, server = report["lab"], report["server"]
    assert report["agree"] is True
    for p in report["per_prompt"]:
        assert (p["lab"]["drafted"], p["lab"]["accepted"]) == (p["server"]["drafted"], p["server"]["accepted"])
        assert p["same_text"] and p["lab"]["tokens_generated"] == p["server"]["tokens_generated"] == 64
    assert server["drafted"] > 0 and 0 < server["accepted"] <= server["drafted"]
    assert lab["acceptance_rate"] == pytest.approx(server["acceptance_rate"])
    assert lab["tokens_per_s"] > 0 and server["tokens_per_s"] > 0
    assert report["ratio"] == pytest.approx(server["tokens_per_s"] / lab["tokens_per_s"], rel=1e-3)
    # /props and /metrics of the same server
    assert server["build_info"] and report["metrics_agree"] is True
    assert server["metrics"]["spec_decode_num_drafts_total"] == lab["steps"]
    assert server["metrics"]["accepted_by_position"] == lab["accepted_by_position"]
    assert "--spec-type" in report["argv"] and report["dialect"] == "current"
    text = format_report(report)
    assert "agree: yes" in text and "llama-server build:" in text


def test_validate_repeats_passes_side_by_side_and_compares_medians(pair):
    target, draft = pair
    report = validate(
        LoadSettings(target, draft, ctx=2048),
        SpecSettings("draft-simple", draft_n_max=3),
        SamplingSettings(temp=0.0),
        list(PROMPTS[1:3]),
        32,
        passes=3,
    )
    passes = report["passes"]
    assert report["mode"] == "side by side"  # a small pair on a CPU build fits twice in RAM
    assert len(passes) == 3 and all(p["lab_tps"] > 0 and p["server_tps"] > 0 for p in passes)
    assert report["agree"] is True  # every pass drafted and accepted the same as the first
    assert report["lab"]["tokens_per_s"] == sorted(p["lab_tps"] for p in passes)[1]
    assert report["server"]["tokens_per_s"] == sorted(p["server_tps"] for p in passes)[1]
    assert report["ratio"] == sorted(p["ratio"] for p in passes)[1]
    # one server answered all three passes, and its counters say so
    assert report["metrics_agree"] is True
    assert report["server"]["metrics"]["spec_decode_num_draft_tokens_total"] == 3 * report["server"]["drafted"]
    text = format_report(report)
    assert "median of 3 passes" in text and "run side by side" in text
    with pytest.raises(ValidateError, match="--passes"):
        validate(LoadSettings(target, draft), SpecSettings("draft-simple"), SamplingSettings(), ["x"], 8, passes=0)


def test_an_ngram_pool_that_learns_across_passes_learns_alike_on_both_sides():
    # ngram-mod's pool outlives a request in llama-server and in the lab: the second pass drafts
    # from what the first taught it, on both sides the same (the demo pair repeats itself enough to draft)
    target, _ = demo_pair("q8_0")
    prompt = load_prompts("code-completion")[0]
    report = validate(
        LoadSettings(target, ctx=1024, threads=1),
        SpecSettings("ngram-mod"),
        SamplingSettings(temp=0.0),
        [prompt, prompt],
        64,
        passes=2,
    )
    assert report["mode"] == "side by side" and report["agree"] is True
    assert report["server"]["drafted"] > 0
    # the second pass drafted on its first prompt too: the server's pool outlived the first pass
    assert report["server"]["metrics"]["spec_decode_num_draft_tokens_total"] > 2 * report["server"]["drafted"]


def test_validate_one_after_the_other_agrees_too(pair):
    # the way a pair on the GPU is validated: the server stopped before the lab loads
    target, draft = pair
    report = validate(
        LoadSettings(target, draft, ctx=2048),
        SpecSettings("draft-simple", draft_n_max=3),
        SamplingSettings(temp=0.0),
        [PROMPTS[1]],
        32,
        passes=2,
        sequential=True,
    )
    assert report["mode"] == "one after the other" and len(report["passes"]) == 2
    assert report["agree"] is True and report["metrics_agree"] is True
    assert report["server"]["metrics"]["spec_decode_num_draft_tokens_total"] == report["server"]["drafted"]


def test_only_a_pair_outside_the_gpu_with_room_in_ram_runs_side_by_side():
    small = [
        {"buffer_type": "CPU_REPACK", "model_bytes": 1 << 20, "context_bytes": 0, "compute_bytes": 0},
        {"buffer_type": "CPU_Mapped", "model_bytes": 1 << 40},
    ]  # mapped pages are shared
    assert _fits_beside({"memory": small})
    assert not _fits_beside({"memory": small + [{"buffer_type": "CUDA0", "model_bytes": 1 << 20}]})
    huge = [{"buffer_type": "CPU", "context_bytes": 1 << 50}]
    assert not _fits_beside({"memory": huge})
    cpu_only, with_gpu = {"devices": [{"name": "CPU"}]}, {"devices": [{"name": "CPU"}, {"name": "CUDA0"}]}
    assert not _offloads(cpu_only, LoadSettings("t.gguf"))
    assert _offloads(with_gpu, LoadSettings("t.gguf"))
    assert not _offloads(with_gpu, LoadSettings("t.gguf", ngl=0))
    assert _offloads(with_gpu, LoadSettings("t.gguf", "d.gguf", ngl=0, ngl_draft=-1))


def test_validate_above_temperature_0_compares_only_with_a_fixed_seed(pair):
    target, draft = pair
    load, spec = LoadSettings(target, draft, ctx=1024), SpecSettings("draft-simple", draft_n_max=3)
    fixed = validate(load, spec, SamplingSettings(temp=0.9, seed=3), [PROMPTS[0], PROMPTS[1]], 24)
    assert fixed["agree"] is True and all(p["same_text"] for p in fixed["per_prompt"])
    assert "agree: yes" in format_report(fixed)
    report = validate(load, spec, SamplingSettings(temp=0.9), [PROMPTS[0]], 24)  # a random seed
    assert report["agree"] is None
    assert report["server"]["tokens_generated"] == 24 and report["lab"]["tokens_generated"] == 24
    assert "not compared" in format_report(report)


CLI = (
    "import argparse, sys\n"
    "from engine.cli.deploy import register\n"
    "p = argparse.ArgumentParser(prog='spectune')\n"
    "register(p.add_subparsers(dest='command'))\n"
    "a = p.parse_args(sys.argv[1:])\n"
    "sys.exit(a.func(a))\n"
)


def run_cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPECTUNE_DATA_DIR=str(data_dir))
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parent.parent,
        env=env,
    )


def test_cli_validate_json_is_stored_in_the_history(pair, tmp_path):
    target, draft = pair
    proc = run_cli(
        tmp_path,
        "validate",
        "--target",
        str(target),
        "--draft",
        str(draft),
        "--ctx",
        "1024",
        "--spec-type",
        "ngram-simple,draft-simple",
        "--draft-n-max",
        "3",
        "--ngram-size-n",
        "3",
        "--ngram-size-m",
        "8",
        "--prompt",
        PROMPTS[3],
        "--prompt",
        PROMPTS[2],
        "--max-tokens",
        "48",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert {"tokens_per_s", "drafted", "accepted", "acceptance_rate"} <= set(report["lab"])
    assert {"tokens_per_s", "drafted", "accepted"} <= set(report["server"])
    assert report["agree"] is True and report["ratio"] > 0
    assert (report["lab"]["drafted"], report["lab"]["accepted"]) == (
        report["server"]["drafted"],
        report["server"]["accepted"],
    )
    shown = run_cli(tmp_path, "history", "show", str(report["history_id"]), "--json")
    entry = json.loads(shown.stdout)
    assert entry["kind"] == "validate" and entry["llama_build"] == report["server"]["build_info"]
    assert entry["tokens_per_s"] == report["server"]["tokens_per_s"]
    assert entry["settings"]["spec"]["spec_type"] == "ngram-simple,draft-simple"
    assert entry["models"]["draft"]["size"] == draft.stat().st_size


def test_cli_validate_without_prompts_is_an_error(pair, tmp_path):
    target, draft = pair
    proc = run_cli(tmp_path, "validate", "--target", str(target), "--draft", str(draft))
    assert proc.returncode == 2 and proc.stderr.startswith("spectune: error: no prompts")
    assert "Traceback" not in proc.stderr


def test_prompts_come_from_the_options_and_a_workload_file(tmp_path):
    assert load_prompts(prompts=["a", "b"]) == ["a", "b"]
    shipped = Path(__file__).parent.parent / "resources" / "workloads" / "code-completion.json"
    texts = json.loads(shipped.read_text())["prompts"]
    assert load_prompts(shipped, ["extra"]) == ["extra"] + [p["text"] for p in texts]
    with pytest.raises(ValidateError, match="no prompts"):
        load_prompts(prompts=["  "])


def test_metrics_text_is_read_for_the_spec_decode_counters():
    text = "\n".join(
        [
            "# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated",
            "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter",
            "llamacpp:spec_decode_num_draft_tokens_total 120",
            "llamacpp:spec_decode_num_accepted_tokens_total 77",
            "llamacpp:spec_decode_num_drafts_total 40",
            "llamacpp:tokens_predicted_total 200",
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 35',
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 12',
        ]
    )
    assert parse_metrics(text) == {
        "spec_decode_num_draft_tokens_total": 120,
        "spec_decode_num_accepted_tokens_total": 77,
        "spec_decode_num_drafts_total": 40,
        "accepted_by_position": [35, 0, 12],
    }


def test_validate_reports_progress_and_stops_between_runs_when_asked(pair):
    target, draft = pair
    seen: list[tuple[int, int, str]] = []
    stop = StopSwitch()

    def progress(done: int, total: int, what: str) -> None:
        seen.append((done, total, what))
        if done == 2:
            stop.set()  # after two runs (one prompt on each side)

    with pytest.raises(ValidateCancelled):
        validate(
            LoadSettings(target, draft, ctx=1024),
            SpecSettings("draft-simple", draft_n_max=3),
            SamplingSettings(temp=0.0),
            list(PROMPTS[:3]),
            16,
            progress=progress,
            stop=stop,
        )
    assert seen[0][2] == "starting the lab's engine" and all(total == 6 for _, total, _ in seen)
    assert [d for d, _, _ in seen] == sorted(d for d, _, _ in seen) and seen[-1][0] == 2
    assert any(what.startswith("llama-server: prompt 1 of 3") for _, _, what in seen)
    assert not _children_named("llama-server")  # the server it started is gone


def _children_named(name: str) -> list[str]:
    out = subprocess.run(["ps", "-o", "comm=", "--ppid", str(os.getpid())], capture_output=True, text=True).stdout
    return [line for line in out.split() if name in line]


def test_a_stop_interrupts_the_run_under_way(pair):
    # a long generation on llama-server: the stop must not wait for it to finish
    target, draft = pair
    stop, seen = StopSwitch(), []
    started = threading.Event()

    def progress(done: int, total: int, what: str) -> None:
        seen.append(done)
        if what.startswith("llama-server: prompt 1"):
            started.set()

    stopped_at: list[float] = []

    def stop_soon() -> None:
        started.wait(120)
        time.sleep(0.3)  # the request is in flight by now
        stopped_at.append(time.monotonic())
        stop.set()

    threading.Thread(target=stop_soon, daemon=True).start()
    with pytest.raises(ValidateCancelled):
        validate(
            LoadSettings(target, draft, ctx=4096),
            SpecSettings("draft-simple", draft_n_max=3),
            SamplingSettings(temp=0.0),
            [PROMPTS[0], PROMPTS[1]],
            4000,
            progress=progress,
            stop=stop,
            sequential=True,
        )
    assert started.is_set() and max(seen) == 0  # the long run never finished
    # llama-server often ignores SIGTERM while it streams to a reader; it is killed after a grace period
    # (server_runner.TERMINATE_GRACE_S) rather than left streaming its 4000 tokens, or longer
    assert time.monotonic() - stopped_at[0] < TERMINATE_GRACE_S + 5
    assert not _children_named("llama-server")


def test_a_server_stopped_before_or_while_starting_gives_up(tmp_path):
    from engine.llama.install import server_path
    from engine.llama.server import LlamaServer, ServerError

    # the model is a FIFO: llama-server blocks opening it, so it stays "starting" (503 Loading model)
    # until the stop, however fast this machine is
    model = tmp_path / "model.gguf"
    os.mkfifo(model)
    argv = [str(server_path()), "-m", str(model), "-c", "512", "-np", "1"]
    srv = LlamaServer(argv)
    srv.terminate()  # a stop that came first: nothing is started
    with pytest.raises(ServerError, match="stopped before it started"):
        srv.start()
    assert not _children_named("llama-server")

    srv = LlamaServer(argv)
    writer: list[int] = []

    def stop_once_it_opens_its_model() -> None:
        writer.append(os.open(model, os.O_WRONLY))  # returns once llama-server has opened the other end
        srv.terminate()

    stopper = threading.Thread(target=stop_once_it_opens_its_model, daemon=True)
    stopper.start()
    try:
        with pytest.raises(ServerError) as exc:
            srv.start()
    finally:
        os.close(os.open(model, os.O_RDONLY | os.O_NONBLOCK))  # frees the stopper if the server never opened it
        stopper.join(30)
        for fd in writer:
            os.close(fd)
    assert "stopped while starting" in str(exc.value), str(exc.value)  # not a crash, not a timeout
    assert exc.value.exit_code is None and not _children_named("llama-server")
