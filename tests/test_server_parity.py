"""specrt against the bundled llama-server: same flags, same models, same prompt, temperature 0.

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
    for prompt, srv_result in zip(prompts, server):
        ours = generate(client, prompt, 96, spec, sampling)
        assert ours["text"] == srv_result["text"], "same text as llama-server"
        assert (ours["drafted"], ours["accepted"]) == (srv_result["drafted"], srv_result["accepted"]), (prompt, server)
        assert ours["tokens_generated"] == srv_result["tokens_generated"] == 96
    assert sum(s["drafted"] for s in server) > 0, "the case must actually draft"
