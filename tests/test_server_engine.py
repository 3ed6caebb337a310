"""The llama-server engine (engine.runtime.server_engine) behind the worker protocol, and the way SpecTune
goes on when its own engine cannot start: a libspecrt whose constructor crashes stands in for the H200's
SIGSEGV inside dlopen (bench/results/gpu_check-2026-12-04-1332.txt)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.core.paths import REPO_ROOT
from engine.core.settings import LoadSettings
from engine.llama.devices import parse_devices
from engine.runtime.client import EngineClient, EngineError, EngineUnavailable
from engine.runtime.engine_choice import describe_native_failure, native_failure

from .conftest import PROMPTS

pytestmark = pytest.mark.server

SPECS = (
    {"spec_type": "draft-simple", "draft_n_max": 3},
    {"spec_type": "draft-simple", "draft_n_max": 6},
    {"spec_type": "ngram-simple", "ngram_size_n": 3, "ngram_size_m": 8},
)


def write_crashing_library(folder: Path) -> Path:
    """A shared library that dies of SIGSEGV as the loader runs its constructor, as libspecrt did on the H200."""
    src = folder / "crash.c"
    src.write_text(
        "#include <signal.h>\n"
        "__attribute__((constructor)) static void die_on_load(void) { raise(SIGSEGV); }\n"
        "int specrt_abi_version(void) { return 0; }\n"
    )
    lib = folder / "libcrash.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


@pytest.fixture(scope="module")
def crashing_specrt(tmp_path_factory) -> Path:
    return write_crashing_library(tmp_path_factory.mktemp("crash"))


def _run(client: EngineClient, prompt: str, spec: dict, baseline: bool = False) -> tuple[dict, list[dict]]:
    events = list(client.generate(prompt, 48, baseline=baseline, spec=spec, sampling={"temp": 0.0}))
    assert events[-1]["event"] == "done", events[-1]
    return events[-1]["summary"], events


def test_llama_server_engine_gives_the_native_engines_counts(pair):
    """At temperature 0 the same pair drafts and keeps the same tokens, step by step, in both engines."""
    load = LoadSettings(pair[0], pair[1], ctx=1024)
    got: dict[str, list] = {}
    for engine in ("native", "llama-server"):
        with EngineClient(engine=engine) as client:
            client.start()
            assert client.engine_kind == engine == client.hello["engine_kind"]
            loaded = client.load(load)
            got[f"{engine} memory"] = {(m["model"], m["buffer_type"]): m for m in loaded["memory"]}
            rows = []
            for spec in SPECS:
                for prompt in PROMPTS[:2]:
                    s, events = _run(client, prompt, spec)
                    cycles = [e for e in events if e["event"] == "cycle"]
                    assert s["tokens_generated"] == sum(c["emitted"] for c in cycles) == 48
                    steps = [(c["drafted"], c["accepted"]) for c in cycles if not c["prompt"]]
                    rows.append((s["drafted"], s["accepted"], s["steps"], s["text"], steps, s["accepted_by_position"]))
            base, _ = _run(client, PROMPTS[0], SPECS[0], baseline=True)
            assert base["drafted"] == 0 and base["tokens_generated"] == 48
            rows.append(base["text"])
            got[engine] = rows
    assert got["native"] == got["llama-server"]
    assert any(r[0] for r in got["native"][:-1]), "the settings drafted something"
    # the buffers llama-server's log reports at load are the native engine's, to its two decimals of MiB
    native, served = got["native memory"], got["llama-server memory"]
    assert set(native) == set(served) and {m for m, _ in native} == {"target", "draft"}
    for key, item in native.items():
        for field in ("model_bytes", "context_bytes", "compute_bytes"):
            assert abs(served[key][field] - item[field]) <= 6 * 1024, (key, field, served[key], item)


def test_a_changed_setting_restarts_llama_server_at_the_next_generation(pair):
    with EngineClient(engine="llama-server") as client:
        client.start()
        client.load(LoadSettings(pair[0], pair[1], ctx=1024))
        starts = []
        for spec in (SPECS[0], SPECS[0], SPECS[1]):
            _, events = _run(client, PROMPTS[0], spec)
            starts.append(events[0])
        # the load started the server for draft-simple K=3 already; K=6 needs a new one
        assert [bool(ev.get("server_restarted")) for ev in starts] == [False, False, True]
        assert starts[2]["server_start_s"] > 0
        # a knob moved during a generation is taken, and said to count from the next generation
        req = client.start_generate(PROMPTS[2], 200, spec=SPECS[0], sampling={"temp": 0.0})
        client.update(spec={"draft_n_max": 5})
        updated = client.wait_for(("updated",), timeout=120)
        assert updated["from_cycle"] is None and updated["from_next_generation"]
        client.wait_for(("done",), req, timeout=120)
        s, events = _run(client, PROMPTS[0], {})
        assert events[0]["spec"]["draft_n_max"] == 5 and events[0]["server_restarted"]
        # what llama-server cannot do is refused in words
        with pytest.raises(EngineError, match="forward passes") as exc:
            client.measure("target", [1, 2])
        assert exc.value.kind == "unsupported"


def test_cancel_stops_a_llama_server_generation(pair):
    with EngineClient(engine="llama-server") as client:
        client.start()
        client.load(LoadSettings(pair[0], pair[1], ctx=4096))
        req = client.start_generate(PROMPTS[3], 3000, spec=SPECS[0], sampling={"temp": 0.0})
        client.wait_for(("cycle",), timeout=120)
        client.cancel()
        ev = client.wait_for(("cancelled",), req, timeout=60)
        assert ev["summary"]["tokens_generated"] < 3000
        s, _ = _run(client, PROMPTS[0], SPECS[0])  # the engine goes on
        assert s["tokens_generated"] == 48


def test_a_crashing_native_library_is_named_and_auto_measures_through_llama_server(pair, crashing_specrt):
    env = {**os.environ, "SPECTUNE_SPECRT": str(crashing_specrt)}
    with EngineClient(engine="native", env=env) as client:
        with pytest.raises(EngineUnavailable) as exc:
            client.start()
    message = str(exc.value)
    assert "SIGSEGV while loading its native library" in message and str(crashing_specrt) in message
    assert "llama-server" in message  # what still works
    with EngineClient(env=env) as client:
        hello = client.start()
        assert client.engine_kind == "llama-server" and "SIGSEGV" in hello["native_failure"]
        client.load(LoadSettings(pair[0], pair[1], ctx=1024))
        s, _ = _run(client, PROMPTS[0], SPECS[0])
        assert s["drafted"] > 0
    # remembered for this library only: the built libspecrt is still tried first
    assert native_failure(str(crashing_specrt)) and native_failure("") is None


def test_cli_run_with_a_crashing_native_library_gives_its_result_through_llama_server(crashing_specrt, tmp_path):
    env = {**os.environ, "SPECTUNE_SPECRT": str(crashing_specrt), "SPECTUNE_DATA_DIR": str(tmp_path)}
    argv = [sys.executable, "-m", "engine.cli", "run", "--demo", "--prompt", "def f(x):", "--max-tokens", "24"]
    auto = subprocess.run(
        [*argv, "--json", "--baseline"], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=90
    )
    assert auto.returncode == 0, auto.stderr
    out = json.loads(auto.stdout)
    assert out["engine"] == "llama-server" and "SIGSEGV" in out["native_failure"]
    assert out["drafted"] >= out["accepted"] > 0 and out["speedup"] > 0 and out["baseline_tokens_per_s"] > 0
    assert "Traceback" not in auto.stderr and "Measuring through llama-server" in auto.stderr
    native = subprocess.run(
        [*argv, "--engine", "native"], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=90
    )
    assert native.returncode == 2 and "Traceback" not in native.stderr
    assert "could not start on this machine: it crashed with SIGSEGV" in native.stderr


def test_llama_server_devices_are_read_from_its_listing():
    text = (
        "ggml_cuda_init: found 1 CUDA devices:\n"
        "Available devices:\n"
        "  CUDA0: NVIDIA H200 (143156 MiB, 142506 MiB free)\n"
        "  Vulkan0: AMD Radeon RX 7900 XTX (RADV NAVI31) (24560 MiB, 24000 MiB free)\n"
    )
    assert parse_devices(text) == [
        {"name": "CUDA0", "description": "NVIDIA H200", "total_mib": "143156", "free_mib": "142506"},
        {
            "name": "Vulkan0",
            "description": "AMD Radeon RX 7900 XTX (RADV NAVI31)",
            "total_mib": "24560",
            "free_mib": "24000",
        },
    ]
    assert parse_devices("Available devices:\n") == []


@pytest.mark.parametrize(
    ("code", "tail", "fatal", "says"),
    [
        (
            -11,
            "specrt: loading /x/libspecrt.so\nFatal Python error: Segmentation fault\n"
            '  File "/x/engine/runtime/binding.py", line 184 in load_library\n',
            "",
            "crashed with SIGSEGV while loading its native library (/x/libspecrt.so)",
        ),
        (
            -6,
            '  File "/x/engine/llama/backends.py", line 200 in load_backends\n',
            "",
            "SIGABRT while loading llama.cpp's backend modules",
        ),
        (
            3,
            "",
            "libspecrt ABI 6 does not match this engine's 7; rebuild native/",
            "could not be loaded: libspecrt ABI 6",
        ),
        (
            1,
            "ImportError: no module named ctypes\n",
            "",
            "exited with status 1 before it was ready (its last line: ImportError",
        ),
    ],
)
def test_a_native_failure_is_said_in_words(code, tail, fatal, says):
    text = describe_native_failure(code, tail, fatal)
    assert says in text and "What still works" in text
    assert "Fatal Python error" not in text


def test_on_the_demo_pair_both_engines_draft_and_accept_the_same(tmp_path):
    """`spectune run --demo` through each engine at temperature 0: the same counts and the same text."""
    env = {**os.environ, "SPECTUNE_DATA_DIR": str(tmp_path)}
    got = {}
    for engine in ("native", "llama-server"):
        argv = [sys.executable, "-m", "engine.cli", "run", "--demo", "--engine", engine, "--json"]
        argv += ["--workload", "code-completion", "--max-tokens", "32", "--spec-type", "draft-simple"]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=300)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert out["engine"] == engine
        got[engine] = [(p["drafted"], p["accepted"], p["text"]) for p in out["prompts"]]
    assert got["native"] == got["llama-server"] and any(d for d, _, _ in got["native"])


def test_a_llama_server_killed_by_sigill_while_repacking_is_started_again_without_repacking(pair, tmp_path):
    """As the native engine does (engine.runtime.client.load): a CPU whose AMX the system does not enable kills
    llama.cpp with SIGILL while it repacks the weights. Here a wrapper of the bundled llama-server dies so
    whenever it is asked to load a model with repacking on."""
    from engine.llama.install import server_path

    wrapper = tmp_path / "llama-server"
    wrapper.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" -m "*) case " $* " in *" -nr "*) ;; *) kill -ILL $$ ;; esac ;; esac\n'
        f'exec "{server_path()}" "$@"\n'
    )
    wrapper.chmod(0o755)
    with EngineClient(engine="llama-server", server=wrapper) as client:
        client.start()
        loaded = client.load(LoadSettings(pair[0], pair[1], ctx=1024))
        assert loaded["repack"] is False and "SIGILL" in loaded["notice"]
        s, _ = _run(client, PROMPTS[0], SPECS[0])
        assert s["drafted"] > 0


@pytest.mark.parametrize("engine", ["native", "llama-server"])
def test_a_prompt_measured_again_is_not_drafted_from_its_own_earlier_answer(engine):
    """Issue 51: the Lab replays its prompts, and ngram-mod's pool outlives a request, so the second
    pass once copied the first pass's answer (acceptance 0.99). A measured generation now meets the
    speculators a freshly started llama-server has: the same prompt twice gives the same counts. Kept
    learning (fresh=False, as one long-running server does) the second pass drafts more: the
    inflation this guards against is real on this pair."""
    from engine.measure.validate import load_prompts
    from engine.models.demo_models import demo_pair

    target, _ = demo_pair("q8_0")
    prompt = load_prompts("code-completion")[0]
    spec = {"spec_type": "ngram-mod", "ngram_mod_n_match": 3, "ngram_mod_n_min": 1, "ngram_mod_n_max": 8}

    def counts(client: EngineClient, fresh: bool) -> tuple[int, int]:
        events = list(client.generate(prompt, 64, spec=spec, sampling={"temp": 0.0}, fresh=fresh))
        assert events[-1]["event"] == "done", events[-1]
        return events[-1]["summary"]["drafted"], events[-1]["summary"]["accepted"]

    with EngineClient(engine=engine) as client:
        client.start()
        client.load(LoadSettings(target, ctx=1024, threads=1))
        first, again = counts(client, True), counts(client, True)
        learnt = counts(client, False)
    assert first == again, "a fresh measurement does not depend on what ran before it"
    assert learnt[0] > first[0] and learnt[1] > first[1], (first, learnt)
