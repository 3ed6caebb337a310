"""The spectune command, run as a user would: a subprocess with an argv list."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.measure.candidates import QUICK

from .conftest import PROMPTS

SPECTUNE = [sys.executable, "-m", "engine.cli"]
ROOT = Path(__file__).resolve().parent.parent


def spectune(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(SPECTUNE + list(args), capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.mark.slow
def test_run_json_with_baseline(pair):
    target, draft = pair
    r = spectune(
        "run",
        "--target",
        str(target),
        "--draft",
        str(draft),
        "--draft-n-max",
        "4",
        "--prompt",
        PROMPTS[0],
        "--max-tokens",
        "64",
        "--baseline",
        "--json",
        "--ctx",
        "512",
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout.strip().splitlines()[-1])
    for key in (
        "tokens_generated",
        "tokens_per_s",
        "drafted",
        "accepted",
        "acceptance_rate",
        "steps",
        "mean_accepted_length",
        "accepted_by_position",
        "draft_ms",
        "verify_ms",
        "text",
        "baseline_tokens_per_s",
        "speedup",
    ):
        assert key in s, key
    assert s["tokens_generated"] == 64
    assert s["acceptance_rate"] == pytest.approx(s["accepted"] / s["drafted"], abs=1e-5)
    assert s["mean_accepted_length"] == pytest.approx(1 + s["accepted"] / s["steps"], abs=1e-5)
    assert len(s["accepted_by_position"]) <= 4 and s["accepted_by_position"][0] >= s["accepted_by_position"][-1]
    assert s["baseline_text_matches"] is True
    assert s["speedup"] == pytest.approx(s["tokens_per_s"] / s["baseline_tokens_per_s"], rel=1e-3, abs=1e-4)


@pytest.mark.slow
def test_run_events_and_human_output(pair, tmp_path):
    target, draft = pair
    prompt_file = tmp_path / "p.txt"
    prompt_file.write_text(PROMPTS[1], encoding="utf-8")
    r = spectune(
        "run",
        "--target",
        str(target),
        "--draft",
        str(draft),
        "--prompt-file",
        str(prompt_file),
        "--max-tokens",
        "24",
        "--events",
        "--ctx",
        "512",
    )
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert events[0]["prompt"] and all(e["event"] == "cycle" for e in events)
    assert sum(e["emitted"] for e in events) == 24
    r = spectune(
        "run",
        "--target",
        str(target),
        "--spec-type",
        "ngram-simple",
        "--ngram-size-n",
        "2",
        "--prompt",
        PROMPTS[3],
        "--max-tokens",
        "24",
        "--ctx",
        "512",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("cycle ") >= 1 and "acceptance" in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["--draft-n-max", "-2"], "draft_n_max"),
        (["--spec-type", "draft"], "unknown speculative type"),
        (["--temp", "-1"], "temp"),
    ],
)
def test_bad_knobs_exit_2_with_a_reason(pair, args, message):
    target, draft = pair
    r = spectune("run", "--target", str(target), "--draft", str(draft), "--prompt", "x", *args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_missing_and_broken_models(pair, tmp_path):
    r = spectune("run", "--target", str(tmp_path / "none.gguf"), "--prompt", "x")
    assert r.returncode == 2 and "not found" in r.stderr
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"\x00" * 1000)
    r = spectune("run", "--target", str(junk), "--prompt", "x")
    assert r.returncode == 2 and "not a GGUF file" in r.stderr


@pytest.mark.slow
def test_draft_without_spec_type_defaults_to_draft_simple(pair):
    target, draft = pair
    r = spectune(
        "run",
        "--target",
        str(target),
        "--draft",
        str(draft),
        "--prompt",
        PROMPTS[0],
        "--max-tokens",
        "16",
        "--json",
        "--ctx",
        "512",
    )
    s = json.loads(r.stdout.splitlines()[-1])
    assert s["spec"]["spec_type"] == "draft-simple" and s["drafted"] > 0


@pytest.mark.slow
def test_run_over_a_workload_adds_the_prompts_up(pair, tmp_path):
    """--workload runs every prompt of a set (here a user file) and sums drafted/accepted/tokens;
    each prompt's own numbers come along."""
    target, draft = pair
    prompts = [{"id": f"p{i}", "text": text} for i, text in enumerate(PROMPTS * 3)][:10]
    wl = tmp_path / "mine.json"
    wl.write_text(json.dumps({"name": "mine", "description": "test prompts", "prompts": prompts}))
    r = spectune(
        "run",
        "--target",
        str(target),
        "--draft",
        str(draft),
        "--workload",
        str(wl),
        "--max-tokens",
        "12",
        "--baseline",
        "--json",
        "--ctx",
        "512",
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert (
        s["workload"] == "mine"
        and s["generations"] == 10
        and [p["id"] for p in s["prompts"]] == [p["id"] for p in prompts]
    )
    assert s["tokens_generated"] == 120 == sum(p["tokens_generated"] for p in s["prompts"])
    assert s["drafted"] == sum(p["drafted"] for p in s["prompts"]) > 0
    assert s["accepted"] == sum(p["accepted"] for p in s["prompts"])
    assert s["acceptance_rate"] == pytest.approx(s["accepted"] / s["drafted"], abs=1e-5)
    assert s["baseline_text_matches"] is True and s["speedup"] > 0
    assert s["target"] == str(target) and s["draft"] == str(draft)


@pytest.mark.slow
def test_run_model_choice_errors(pair, tmp_path):
    target, draft = pair
    r = spectune("run", "--prompt", "x")
    assert r.returncode == 2 and "--demo" in r.stderr and "Traceback" not in r.stderr
    r = spectune("run", "--demo", "--target", str(target), "--prompt", "x")
    assert r.returncode == 2 and "leave out --target" in r.stderr
    r = spectune("run", "--target", str(target), "--workload", "no-such-set", "--prompt", "x")
    assert r.returncode == 2  # argparse: --workload and --prompt exclude each other
    r = spectune("run", "--target", str(target), "--workload", "no-such-set")
    assert r.returncode == 2 and "no-such-set" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_server_path():
    r = spectune("server-path")
    assert r.returncode == 0
    path = Path(r.stdout.strip())
    assert path.name.startswith("llama-server") and path.exists()


@pytest.mark.slow
def test_demo_json(tmp_path):
    r = spectune("demo", "--json", "--quick", "--max-tokens", "32", timeout=600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert Path(out["target"]).exists() and Path(out["draft"]).exists()
    assert out["baseline_tokens_per_s"] > 0 and out["results"]
    # the bundled binary itself, nothing in front: it finds its libraries through its RPATH
    words = out["command"].split()
    assert words[0].endswith("llama-server") and "--spec-type" in words
    # the quick check's answer: its settings, each by its median ratio to no speculation in the same rounds
    assert {r["setting"] for r in out["results"]} == {s.label(sizes=True) for s in QUICK} and out["rounds"] == 2
    assert out["best"]["speedup"] == max(r["speedup"] for r in out["results"])
    assert all(r["low"] <= r["speedup"] <= r["high"] for r in out["results"]) and out["verdict"]


def test_load_progress_is_one_rewritten_line_on_a_terminal_and_nothing_otherwise():
    import io

    from engine.cli.run import LoadProgressLine

    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    show = LoadProgressLine(out)
    for stage, p in (
        ("loading", 0.0),
        ("target", 0.0),
        ("target", 0.5),
        ("target", 0.5),
        ("target", 1.0),
        ("draft", 1.0),
        ("loaded", 1.0),
    ):
        show({"event": "load_progress", "stage": stage, "progress": p})
    text = out.getvalue()
    assert text.split("\r")[1:5] == [
        "loading target   0 %",
        "loading target  50 %",
        "loading target 100 %",
        "loading draft 100 %",
    ]
    assert text.endswith("\r") and "\n" not in text  # the line is wiped once loaded
    plain = io.StringIO()
    LoadProgressLine(plain)({"event": "load_progress", "stage": "target", "progress": 0.5})
    assert plain.getvalue() == ""


@pytest.mark.slow
def test_run_and_tune_carry_on_without_repacking_after_an_illegal_instruction(pair, capsys):
    """The CLI's load step (spectune run and tune), in this process so the test's client can deliver the
    SIGILL: the user is warned, and what is run, recorded and exported uses the settings that loaded."""
    from dataclasses import replace

    from engine.cli.run import _load
    from engine.core.settings import LoadSettings

    from .test_worker_client import SigillOnFirstLoad

    asked = LoadSettings(pair[0], pair[1], ctx=1024, repack=True)
    with SigillOnFirstLoad() as client:
        client.start()
        used = _load(client, asked)
        assert client.sigill_sent_to is not None and client.loaded["settings"]["repack"] is False
    assert used == replace(asked, repack=False)
    err = capsys.readouterr().err
    assert err.startswith("spectune: warning: ") and "repacking off" in err and "-nr" in err
