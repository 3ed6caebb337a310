"""specrt against the bundled llama-server: same flags, same models, same prompt, at temperature 0
and at 0.8 with a fixed seed.

llama-server counts drafted (timings.draft_n) and accepted (timings.draft_n_accepted)
tokens per request; specrt must report the same totals, and the same text.
"""

from __future__ import annotations

import pytest

from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.deploy.export import llama_server_argv
from engine.llama.install import server_path
from engine.llama.server import LlamaServer, server_summary
from engine.measure.generate import generate
from engine.models.demo_models import demo_pair
from engine.runtime.client import EngineClient

from .conftest import PROMPTS

pytestmark = pytest.mark.server

CASES = [
    SpecSettings("draft-simple", draft_n_max=4),
    SpecSettings("draft-simple", draft_n_max=8, draft_p_min=0.5),
    SpecSettings("ngram-simple", ngram_size_n=2, ngram_size_m=8),
    SpecSettings("ngram-map-k", ngram_size_n=2, ngram_size_m=6),
    SpecSettings("ngram-mod", ngram_mod_n_match=3, ngram_mod_n_min=1, ngram_mod_n_max=8),
    SpecSettings("ngram-simple,draft-simple", draft_n_max=3, ngram_size_n=3, ngram_size_m=8),
]


@pytest.fixture(scope="module")
def lab(pair):
    target, draft = pair
    load = LoadSettings(target, draft, ctx=2048)
    with EngineClient() as c:
        c.start()
        c.load(load)
        yield c, load


@pytest.mark.parametrize("spec", CASES, ids=lambda s: f"{s.spec_type}-K{s.draft_n_max}")
def test_same_draft_and_accept_counts_as_llama_server(lab, spec):
    client, load = lab
    sampling = SamplingSettings(temp=0.0)
    argv = llama_server_argv(load, spec, sampling, server_path(), extra=["--fit", "off"])
    prompts = PROMPTS[1:3]
    with LlamaServer(argv) as srv:
        server = [server_summary(srv.complete(p, 96)) for p in prompts]
    for i, (prompt, srv_result) in enumerate(zip(prompts, server)):
        # the first as a freshly started server meets it, the next learning from it as that server does
        ours = generate(client, prompt, 96, spec, sampling, fresh=i == 0)
        assert ours["text"] == srv_result["text"], "same text as llama-server"
        assert (ours["drafted"], ours["accepted"]) == (srv_result["drafted"], srv_result["accepted"]), (prompt, server)
        assert ours["tokens_generated"] == srv_result["tokens_generated"] == 96
    assert sum(s["drafted"] for s in server) > 0, "the case must actually draft"


# Above temperature 0 both sides draw from llama.cpp's own sampler chain (penalties, dry, top-n-sigma,
# top-k, typical, top-p, min-p, xtc, temperature, dist) seeded per request; with a fixed seed the draws
# are the same, so the text and the counts must be the same too. The demo pair, since its real
# (if small) language model makes every n-gram type draft and accept something on code.
HOT = SamplingSettings(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=4242)
HOT_PROMPTS = (
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef add(a, b):\n",
    "import os\nimport sys\nimport os\nimport sys\nimport os\n",
    # the first prompt again: n-gram pools that outlive a request must have learnt the same on both sides
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef add(a, b):\n",
)
HOT_CASES = [
    SpecSettings("none"),
    SpecSettings("draft-simple", draft_n_max=4),
    SpecSettings("ngram-simple", ngram_size_n=2, ngram_size_m=8),
    SpecSettings("ngram-map-k", ngram_size_n=2, ngram_size_m=6),
    SpecSettings("ngram-map-k4v", ngram_size_n=2, ngram_size_m=6),
    SpecSettings("ngram-mod", ngram_mod_n_match=3, ngram_mod_n_min=1, ngram_mod_n_max=8),
    SpecSettings("ngram-cache", draft_n_max=8),
    SpecSettings("ngram-mod,draft-simple", draft_n_max=3, ngram_mod_n_match=3, ngram_mod_n_min=1, ngram_mod_n_max=8),
]


@pytest.mark.parametrize("spec", HOT_CASES, ids=lambda s: f"{s.spec_type}-K{s.draft_n_max}")
def test_same_text_and_counts_as_llama_server_at_temperature_0_8_with_a_fixed_seed(spec):
    target, draft = demo_pair("f16")
    # one thread each: on a small, busy machine spinning thread pools slow both sides many times over
    load = LoadSettings(target, draft if "draft-simple" in spec.types else None, ctx=2048, threads=1, threads_batch=1)
    argv = llama_server_argv(load, spec, HOT, server_path(), extra=["--fit", "off"])
    n = 64
    # a fresh server and a fresh lab: both start with empty n-gram pools
    with LlamaServer(argv) as srv:
        responses = [srv.complete(p, n) for p in HOT_PROMPTS]
    with EngineClient() as client:
        client.start()
        client.load(load)
        # kept learning across the three, as the one server does
        ours = [generate(client, p, n, spec, HOT, fresh=i == 0) for i, p in enumerate(HOT_PROMPTS)]
    for i, (resp, lab) in enumerate(zip(responses, ours)):
        settings = resp["generation_settings"]  # the request left sampling to the server's flags
        assert (settings["temperature"], settings["seed"]) == (pytest.approx(0.8), 4242)
        srv_result = server_summary(resp)
        assert lab["text"] == srv_result["text"], f"prompt {i}: same text as llama-server"
        assert (lab["drafted"], lab["accepted"]) == (srv_result["drafted"], srv_result["accepted"]), i
        assert lab["tokens_generated"] == srv_result["tokens_generated"] == n
    if spec.types:
        assert sum(o["drafted"] for o in ours) > 0 and sum(o["accepted"] for o in ours) > 0, "it must draft and accept"


# llama-server ends a prompt's batches early where the target's cache cannot roll everything back (a
# sliding window, a recurrent state): 4 + n_ubatch and 4 tokens before the end, and before the first and
# the last user message of a conversation, to keep context checkpoints there. Batch shapes change the
# float sums of an F16 model, and here a greedy token: specrt must cut its prompts at the same places.
SPLIT_CONVERSATIONS = (
    {
        "messages": [
            {"role": "system", "content": "the model of the data is in the cache of the target"},
            {"role": "user", "content": "def the value of the data is"},
        ]
    },
    {
        "messages": [
            {"role": "system", "content": "import self return None"},
            {"role": "user", "content": "the draft and the target"},
            {"role": "assistant", "content": "the value of the model"},
            {"role": "user", "content": "for value in list return the data"},
        ]
    },
    {
        "messages": [
            {
                "role": "user",
                "content": "the model and the draft are in the cache of the target model and the draft " * 3,
            }
        ]
    },
)


@pytest.mark.parametrize("chat", [False, True], ids=["raw", "chat"])
def test_a_sliding_window_models_prompts_are_split_as_llama_server_splits_them(tmp_path, chat):
    import json
    import subprocess
    import sys

    argv = [sys.executable, "-m", "testmodels.synthetic", str(tmp_path), "--sliding-window", "64", "--n-layer", "7"]
    argv += ["--dtype", "f16"] + (["--chat-template", "chatml"] if chat else [])
    pair = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    if chat:
        workload = tmp_path / "conversations.jsonl"
        workload.write_text("".join(json.dumps(c) + "\n" for c in SPLIT_CONVERSATIONS), encoding="utf-8")
    argv = [sys.executable, "-m", "engine.cli", "validate", "--target", pair["target"], "--draft", pair["draft"]]
    argv += ["--spec-type", "draft-simple", "--draft-n-max", "4", "--ctx", "1024", "--max-tokens", "96"]
    argv += ["--workload", str(workload) if chat else "code-completion", "--threads", "1", "--json", "--no-history"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr
    result = json.loads(done.stdout)
    assert result["agree"], [(p["lab"], p["server"]) for p in result["per_prompt"]]
    assert all(p["same_text"] for p in result["per_prompt"])
