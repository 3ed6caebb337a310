"""Every knob, mid-run, through the worker (issue 18, item 5).

A knob sent while a generation runs is applied by the worker between two cycles; its ``updated``
event names ``from_cycle``, the first cycle that uses it. For each knob these tests check, from the
cycle events, that the cycles from ``from_cycle`` on follow the new value and the cycles before it the
old one. What each value must show is derived from how the pinned llama.cpp drafts and samples
(common/speculative.cpp, common/ngram-map.cpp, common/sampling.cpp):

- draft-simple with p-min 0 drafts exactly K tokens every cycle (it stops early only on a token the
  draft model is less sure of than p-min, and the token budget here is far away); none drafts nothing.
- p-min: a draft stops at the first token below it, so a high p-min gives drafts shorter than K.
- n-min: a draft shorter than n-min is dropped whole, so no draft has 1..n-min-1 tokens.
- ngram-simple is a pure function of the tokens so far: the last size-n tokens (with the last one
  sampled) are looked up earlier in the history and the size-m tokens after the match are the draft.
  It is recomputed here for every cycle, with the old sizes before from_cycle and the new after.
- ngram min hits (ngram-map-k4v only): a key drafts once it was seen that many times since the
  speculators were built; they are rebuilt when a knob changes, so 1000 is never reached in a short run.
- ngram-mod is replayed here as well (its pool of n-match-grams, learnt in chunks of 32 tokens, emptied
  after five poor drafts): every draft is at most n-max long, dropped when shorter than n-min.
- sampling: the worker rebuilds the sampler at from_cycle, so the tokens from there on are the ones a
  fresh run with the new settings samples when its prompt is the run's context at that cycle; and a
  greedy setting (temperature 0, top-k 1, a tiny top-p, min-p 1) makes an identical draft accept all.
  A change of the speculation knobs alone keeps the sampler, so at a fixed seed the text stays as it was.

Two changes in quick succession add up; values the worker refuses (out of range, or of the wrong type)
leave the run going with the old settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from engine.core.settings import LoadSettings
from engine.runtime.client import EngineClient

from .conftest import PROMPTS

pytestmark = pytest.mark.slow  # every test here starts the engine worker or llama-server

K = 4
MAX_TOKENS = 1_000_000  # runs end by cancel, so no draft is ever shortened by the token budget
GREEDY = {"temp": 0.0}

Phase = list[dict]


def load(client: EngineClient, pair, ctx: int = 2048) -> dict:
    return client.load(LoadSettings(pair[0], pair[1], ctx=ctx, threads=1))


def tokenize(client: EngineClient, text: str) -> list[int]:
    return client.wait_for(("tokens",), client.send("tokenize", text=text, add_special=True), 60)["tokens"]


# -- driving one run through its knob changes ---------------------------------------------------
# A condition sees the cycles since the last change took effect (the phase), all the run's cycles so far
# and the worker's 'updated' events so far.
Condition = Callable[[Phase, list[dict], list[dict]], bool]


def cycles(n: int) -> Condition:
    return lambda phase, run, applied: len(phase) >= n


def seen(test: Callable[[dict], bool], at_least: int = 10) -> Condition:
    """At least ``at_least`` cycles, one of which passes ``test``."""
    return lambda phase, run, applied: len(phase) >= at_least and any(test(c) for c in phase)


@dataclass
class Step:
    """A knob change, sent once the phase before it satisfies ``ready``."""

    spec: dict = field(default_factory=dict)
    sampling: dict = field(default_factory=dict)
    ready: Condition = field(default=cycles(10))


@dataclass
class Run:
    cycles: list[dict]
    applied: list[dict]  # the 'updated' events, in order

    def phases(self) -> list[Phase]:
        """The speculative cycles under each setting: before the first change, then from each from_cycle."""
        bounds = [1] + [u["from_cycle"] for u in self.applied] + [len(self.cycles)]
        return [self.cycles[a:b] for a, b in zip(bounds, bounds[1:])]


def drive(
    client: EngineClient,
    prompt: str,
    spec: dict,
    sampling: dict,
    steps: list[Step],
    until: Condition | None = None,
    n_ctx: int = 2048,
    limit: int = 1000,
) -> Run:
    """One generation: each step is sent once the cycles since the previous change satisfy its ``ready``
    (and the worker has said where that change took effect); after the last, the run goes on until ``until``
    holds for the cycles since it, then is cancelled. It waits only on events: ``limit`` cycles in a phase, or a
    context nearly full, end a run whose phase never shows what it waits for, and the checks here say which."""
    until = until or cycles(12)
    got: list[dict] = []
    applied: list[dict] = []
    errors: list[dict] = []
    sent, waiting, cancelled = 0, False, False
    ev: dict = {}
    for ev in client.generate(prompt, MAX_TOKENS, spec=spec, sampling=sampling):
        kind = ev["event"]
        if kind == "cycle":
            got.append(ev)
            if cancelled or waiting:
                continue
            phase = got[applied[-1]["from_cycle"] if applied else 1 :]
            if len(phase) > limit or ev["n_past"] > n_ctx - 160:
                client.cancel()
                cancelled = True
            elif sent < len(steps):
                if steps[sent].ready(phase, got, applied):
                    client.update(spec=steps[sent].spec, sampling=steps[sent].sampling)
                    sent, waiting = sent + 1, True
            elif until(phase, got, applied):
                client.cancel()
                cancelled = True
        elif kind == "updated":
            # the worker sends the cycles it ran before an update ahead of the 'updated' event
            assert ev["from_cycle"] == len(got), (ev["from_cycle"], len(got))
            applied.append(ev)
            waiting = False
        elif kind == "error":
            errors.append(ev)
            waiting = False
    run = Run(got, applied)
    assert ev["event"] == "cancelled", f"the run ended with {ev['event']}, not by cancel"
    assert not errors, errors
    assert [c["i"] for c in got] == list(range(len(got)))
    assert len(applied) == len(steps), f"the phase before step {len(applied) + 1} never showed what it waited for"
    assert until(run.phases()[-1], got, applied), "the last phase never showed what it waited for"
    # each change starts a new settings epoch at exactly its from_cycle
    for phase in run.phases():
        assert len({c["epoch"] for c in phase}) == 1
    for a, b in zip(run.phases(), run.phases()[1:]):
        assert b[0]["epoch"] == a[-1]["epoch"] + 1
    return run


class Context:
    """The target's cache and the last token sampled (not in the cache yet) when each cycle began, rebuilt
    from the cycle events: the prompt's tokens, then every token emitted so far."""

    def __init__(self, prompt_tokens: list[int]):
        self.prompt = prompt_tokens
        self.emitted: list[int] = []
        self.at: list[tuple[list[int], int]] = []  # at[i]: cycle i

    def follow(self, cycles: list[dict]) -> Context:
        for c in cycles[len(self.at) :]:
            self.at.append((self.prompt + self.emitted[:-1], self.emitted[-1]) if self.emitted else ([], -1))
            self.emitted += c["tokens"]
            assert c["n_past"] == len(self.prompt) + len(self.emitted) - 1, "the rebuilt cache matches the engine's"
        return self


def ngram_simple_draft(tokens: list[int], sampled: int, n: int, m: int) -> int:
    """How many tokens llama.cpp's common_ngram_simple_draft proposes (common/ngram-map.cpp): the last n
    tokens (the sampled one last) are looked for earlier in the history, latest first; the m tokens after
    the match are the draft, none when fewer than n of them exist."""
    cur = len(tokens)
    if cur <= n + m + 1:
        return 0
    pattern = tokens[cur - n + 1 :] + [sampled]
    for j in range(cur - n - 1, 0, -1):
        if tokens[j : j + n] == pattern:
            copy = min(m, cur - (j + n))
            return copy if copy >= n else 0
    return 0


def ngram_simple_oracle(client: EngineClient, prompt: str, n_ctx: int):
    """predicted(cycle, (n, m), run_cycles): what ngram-simple with sizes n, m drafts at that cycle."""
    ctx = Context(tokenize(client, prompt))

    def predicted(c: dict, sizes: tuple[int, int], run: list[dict]) -> int:
        tokens, sampled = ctx.follow(run).at[c["i"]]
        room = n_ctx - len(tokens) - 2  # llama-server's get_n_draft_max; the token budget is far away
        return min(ngram_simple_draft(tokens, sampled, *sizes), room)

    return predicted


def drafts(c: dict) -> bool:
    return c["drafted"] > 0


MASK64 = (1 << 64) - 1


class NgramModReplay:
    """llama.cpp's ngram-mod speculator (common/speculative.cpp, common/ngram-mod.cpp) replayed on a run's
    own tokens: how many tokens it drafts at each cycle. Its pool maps the hash of each n-match tokens to
    the token that followed them last; new n-grams join it in chunks of 32 tokens; a draft follows the pool
    from the last n-match tokens for up to n-max tokens, and is dropped when it ends before n-min; five
    drafts in a row with less than a quarter accepted empty the pool. A knob change rebuilds the speculator,
    which then learns the whole history at once (common_speculative_begin). (Its reset when the pool is a
    quarter full needs a million n-grams, far more than these runs make.)"""

    SIZE = 4 * 1024 * 1024
    EMPTY = -1

    def __init__(self, ctx: Context, settings: list[tuple[int, dict]], n_ctx: int):
        self.ctx, self.settings, self.n_ctx = ctx, settings, n_ctx  # settings: (from cycle, ngram_mod knobs)
        self.predicted: list[int] = [0]  # index i: cycle i; the prompt cycle drafts nothing

    # -- the speculator ------------------------------------------------------------------------------
    def _idx(self, tokens: list[int], i: int) -> int:
        res = 0
        for k in range(self.n):
            res = (res * 6364136223846793005 + tokens[i + k]) & MASK64
        return res % self.SIZE

    def _add(self, tokens: list[int], i: int) -> None:
        self.pool[self._idx(tokens, i)] = tokens[i + self.n]

    def _build(self, knobs: dict, tokens: list[int]) -> None:
        self.n, self.n_min, self.n_max = knobs["ngram_mod_n_match"], knobs["ngram_mod_n_min"], knobs["ngram_mod_n_max"]
        self.pool: dict[int, int] = {}
        self.i_last = self.n_draft_last = self.n_low = 0
        if len(tokens) >= self.n:
            for i in range(len(tokens) - self.n):
                self._add(tokens, i)
            self.i_last = len(tokens) - self.n

    def _draft(self, tokens: list[int], sampled: int) -> int:
        self.n_draft_last = 0
        cur, n = len(tokens), self.n
        if cur < n:
            return 0
        if self.i_last + 32 < cur:
            for i in range(self.i_last, cur - n):
                self._add(tokens, i)
            self.i_last = cur - n
        chain = tokens[cur - n + 1 :] + [sampled]
        for i in range(self.n_max):
            token = self.pool.get(self._idx(chain, i), self.EMPTY)
            if token == self.EMPTY:
                if i < self.n_min:
                    return 0
                break
            chain.append(token)
        self.n_draft_last = len(chain) - n
        return self.n_draft_last

    def _accept(self, n_accepted: int) -> None:
        if self.n_draft_last > 0:
            if n_accepted / self.n_draft_last < 0.25:
                self.n_low += 1
                if self.n_low >= 5:
                    self.pool.clear()
                    self.n_low = self.i_last = 0
            else:
                self.n_low = 0

    # -- replaying a run -----------------------------------------------------------------------------
    def follow(self, cycles: list[dict]) -> list[int]:
        """The drafts predicted for ``cycles`` so far (the run's cycle events, from cycle 0)."""
        self.ctx.follow(cycles)
        starts = dict(self.settings)
        for c in cycles[len(self.predicted) :]:
            i = c["i"]
            tokens, sampled = self.ctx.at[i]
            if i in starts or i == 1:
                self._build(starts.get(i, starts.get(1)), tokens)
            drafted = min(self._draft(tokens, sampled), self.n_ctx - len(tokens) - 2)
            self.predicted.append(drafted)
            if c["drafted"] > 0:
                self._accept(c["accepted"])
        return self.predicted


def mod_knobs(spec: dict) -> dict:
    return {k: v for k, v in spec.items() if k.startswith("ngram_mod_")}


class NgramModOracle:
    """What ngram-mod drafts at each cycle of a run, under the settings the worker's 'updated' events name
    from their from_cycle on; or, with ``last_ignored``, had the last change kept the knobs before it."""

    def __init__(self, prompt_tokens: list[int], start: dict, n_ctx: int):
        self.ctx, self.start, self.n_ctx = Context(prompt_tokens), mod_knobs(start), n_ctx
        self.replays: dict[tuple, NgramModReplay] = {}

    def __call__(self, run: list[dict], applied: list[dict], last_ignored: bool = False) -> list[int]:
        settings = [(1, self.start)] + [(u["from_cycle"], mod_knobs(u["spec"])) for u in applied]
        if last_ignored:
            settings[-1] = (settings[-1][0], settings[-2][1])
        key = tuple((f, tuple(sorted(k.items()))) for f, k in settings)
        if key not in self.replays:
            self.replays[key] = NgramModReplay(self.ctx, settings, self.n_ctx)
        return self.replays[key].follow(run)

    def differs(self, at_least: int = 10) -> Condition:
        """The phase since the last change has a cycle where the old knobs would have drafted otherwise."""

        def condition(phase: Phase, run: list[dict], applied: list[dict]) -> bool:
            new, old = self(run, applied), self(run, applied, last_ignored=True)
            return len(phase) >= at_least and any(new[c["i"]] != old[c["i"]] for c in phase)

        return condition


# -- the method -------------------------------------------------------------------------------------
def test_method_change_mid_run(client, pair):
    """draft-simple -> ngram-simple -> none -> draft-simple: K tokens every cycle, then exactly what
    ngram-simple finds in the history, then nothing, then K again (the draft model catches up first)."""
    n_ctx = load(client, pair)["n_ctx"]
    run = drive(
        client,
        PROMPTS[1],
        {"spec_type": "draft-simple", "draft_n_max": K, "draft_p_min": 0.0, "ngram_size_n": 1, "ngram_size_m": 3},
        GREEDY,
        [
            Step({"spec_type": "ngram-simple"}),
            Step({"spec_type": "none"}, ready=seen(drafts)),
            Step({"spec_type": "draft-simple"}),
        ],
        n_ctx=n_ctx,
    )
    simple, ngram, none, back = run.phases()
    assert [u["spec"]["spec_type"] for u in run.applied] == ["ngram-simple", "none", "draft-simple"]
    assert all(c["drafted"] == K for c in simple + back)
    predicted = ngram_simple_oracle(client, PROMPTS[1], n_ctx)
    assert [c["drafted"] for c in ngram] == [predicted(c, (1, 3), run.cycles) for c in ngram]
    assert all(c["drafted"] == 0 and c["accepted"] == 0 and c["emitted"] == 1 for c in none)


# -- draft-simple's p-min and n-min -------------------------------------------------------------------
def test_p_min_mid_run(client, pair):
    """p-min 0 -> 0.9 -> 0: every draft K long, then drafts cut short where the draft model is unsure,
    then K long again, each from the very cycle the worker names."""
    n_ctx = load(client, pair)["n_ctx"]
    run = drive(
        client,
        PROMPTS[1],
        {"spec_type": "draft-simple", "draft_n_max": K, "draft_p_min": 0.0},
        GREEDY,
        [Step({"draft_p_min": 0.9}), Step({"draft_p_min": 0.0}, ready=seen(lambda c: c["drafted"] < K))],
        n_ctx=n_ctx,
    )
    before, high, after = run.phases()
    assert all(c["drafted"] == K for c in before + after)
    assert all(c["drafted"] <= K for c in high) and any(c["drafted"] < K for c in high)


def test_n_min_mid_run(client, pair):
    """With p-min 0.9 drafts come in every length; n-min 0 -> 3 drops those of 1 or 2 tokens whole."""
    n_ctx = load(client, pair)["n_ctx"]

    def short(c: dict) -> bool:
        return 0 < c["drafted"] < 3

    run = drive(
        client,
        PROMPTS[1],
        {"spec_type": "draft-simple", "draft_n_max": K, "draft_p_min": 0.9, "draft_n_min": 0},
        GREEDY,
        [Step({"draft_n_min": 3}, ready=seen(short))],
        until=lambda phase, run, applied: len(phase) >= 20 and sum(c["drafted"] >= 3 for c in phase) >= 3,
        n_ctx=n_ctx,
    )
    before, after = run.phases()
    assert any(short(c) for c in before)
    assert all(c["drafted"] in (0, 3, 4) for c in after), [c["drafted"] for c in after]


# -- the n-gram sizes -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("start", "change"),
    [
        ({"ngram_size_n": 1, "ngram_size_m": 4}, {"ngram_size_n": 2}),
        ({"ngram_size_n": 1, "ngram_size_m": 2}, {"ngram_size_m": 5}),
    ],
    ids=["size_n", "size_m"],
)
def test_ngram_size_mid_run(client, pair, start, change):
    """ngram-simple drafts exactly what its sizes find in the history: the old sizes up to from_cycle, the
    new ones from it on; the run goes on until a cycle where the two sizes would have drafted differently."""
    n_ctx = load(client, pair)["n_ctx"]
    predicted = ngram_simple_oracle(client, PROMPTS[2], n_ctx)
    old = (start["ngram_size_n"], start["ngram_size_m"])
    new = (change.get("ngram_size_n", old[0]), change.get("ngram_size_m", old[1]))

    def differs(phase: Phase, run: list[dict], applied: list[dict]) -> bool:
        return len(phase) >= 10 and any(predicted(c, old, run) != predicted(c, new, run) for c in phase)

    run = drive(
        client,
        PROMPTS[2],
        {"spec_type": "ngram-simple", **start},
        GREEDY,
        [Step(change, ready=seen(drafts))],
        until=differs,
        n_ctx=n_ctx,
    )
    before, after = run.phases()
    assert [c["drafted"] for c in before] == [predicted(c, old, run.cycles) for c in before]
    assert [c["drafted"] for c in after] == [predicted(c, new, run.cycles) for c in after]


def test_ngram_min_hits_mid_run(client, pair):
    """ngram-map-k4v min hits 1 -> 1000 -> 1: a key drafts once seen that often since the speculators were
    built, and a changed knob rebuilds them, so 1000 cannot be reached in a phase this short: no drafts."""
    n_ctx = load(client, pair)["n_ctx"]
    run = drive(
        client,
        PROMPTS[1],
        {"spec_type": "ngram-map-k4v", "ngram_size_n": 1, "ngram_size_m": 4, "ngram_min_hits": 1},
        GREEDY,
        [Step({"ngram_min_hits": 1000}, ready=seen(drafts)), Step({"ngram_min_hits": 1}, ready=cycles(40))],
        until=seen(drafts),
        n_ctx=n_ctx,
    )
    before, never, again = run.phases()
    assert len(never) < 1000 and all(c["drafted"] == 0 for c in never)
    assert any(drafts(c) for c in before) and any(drafts(c) for c in again)


# -- ngram-mod ------------------------------------------------------------------------------------------
MOD = {"spec_type": "ngram-mod", "ngram_mod_n_match": 2, "ngram_mod_n_min": 0, "ngram_mod_n_max": 64}
MOD_PROMPT = PROMPTS[2]  # its greedy text breaks ngram-mod's chains early every few dozen cycles


@pytest.mark.parametrize(
    ("start", "change"),
    [
        (MOD, {"ngram_mod_n_max": 3}),
        ({**MOD, "ngram_mod_n_match": 4}, {"ngram_mod_n_min": 64}),
        (MOD, {"ngram_mod_n_match": 1024}),
        ({**MOD, "ngram_mod_n_match": 4}, {"ngram_mod_n_match": 2}),
    ],
    ids=["n_max", "n_min", "n_match_up", "n_match_down"],
)
def test_ngram_mod_sizes_mid_run(client, pair, start, change):
    """ngram-mod drafts exactly what llama.cpp's speculator, replayed here on the run's tokens, drafts: with
    the old knobs up to from_cycle, rebuilt with the new ones there; the run goes on until a cycle where the
    old knobs would have drafted otherwise. (n-max bounds a draft, n-min drops one that ends before it,
    n-match is how many tokens must match.)"""
    n_ctx = load(client, pair, ctx=4096)["n_ctx"]
    oracle = NgramModOracle(tokenize(client, MOD_PROMPT), start, n_ctx)
    run = drive(
        client,
        MOD_PROMPT,
        start,
        GREEDY,
        [Step(change, ready=seen(drafts))],
        until=oracle.differs(),
        n_ctx=n_ctx,
    )
    assert [c["drafted"] for c in run.cycles] == oracle(run.cycles, run.applied)


# -- sampling -------------------------------------------------------------------------------------------
N_AFTER = 40  # tokens compared after a sampling change
PROMPT = PROMPTS[3]  # its greedy continuation reads back as the same tokens (1500 tokens checked)


def generated(client: EngineClient, prompt: str, n: int, sampling: dict, spec: dict | None = None) -> list[int]:
    events = list(client.generate(prompt, n, spec=spec or {"spec_type": "none"}, sampling=sampling))
    assert events[-1]["event"] == "done"
    return [t for e in events if e["event"] == "cycle" for t in e["tokens"]]


@pytest.mark.parametrize(
    ("start", "change", "old"),
    [
        ({"temp": 0.0}, {"temp": 3.0}, {}),
        ({"top_k": 1}, {"top_k": 5}, {}),
        ({"top_p": 1e-6}, {"top_p": 1.0}, {}),
        ({"min_p": 1.0}, {"min_p": 0.0}, {}),
        # the seed with top-k: a seed alone changes nothing while sampling is greedy
        ({"top_k": 1}, {"top_k": 5, "seed": 99}, {"top_k": 5}),
    ],
    ids=["temp", "top_k", "top_p", "min_p", "seed"],
)
def test_sampling_change_mid_run_samples_like_a_fresh_run(client, pair, start, change, old):
    """Each run starts greedy (so its text reads back as the same tokens), then a sampling knob changes.
    The worker rebuilds the sampler at from_cycle with the new settings: the tokens from there on are those
    a fresh run samples from the same context (the prompt plus the text so far) with the new settings, and
    not those the old setting samples there."""
    load(client, pair)
    # hot sampling among the 5 likeliest tokens: unlike greedy, and with few boundaries between them for
    # the last bits of the logits (a batched prompt and a cycle at a time round differently) to move a draw over
    base = {"temp": 3.0, "top_k": 5, "top_p": 1.0, "min_p": 0.0, "seed": 11, **start}
    run = drive(client, PROMPT, {"spec_type": "none"}, base, [Step(sampling=change)], until=cycles(N_AFTER))
    f = run.applied[0]["from_cycle"]
    assert run.applied[0]["sampling"] == {**run.applied[0]["sampling"], **change}
    before = [t for c in run.cycles[:f] for t in c["tokens"]]
    after = [t for c in run.cycles[f:] for t in c["tokens"]][:N_AFTER]
    context = PROMPT + "".join(c["text"] for c in run.cycles[:f])
    assert tokenize(client, context) == tokenize(client, PROMPT) + before, "the context reads back the same"
    assert after == generated(client, context, N_AFTER, {**base, **change})
    assert after != generated(client, context, N_AFTER, {**base, **old})


@pytest.mark.parametrize(
    "change", [{"temp": 0.0}, {"top_k": 1}, {"top_p": 1e-6}, {"min_p": 1.0}], ids=["temp", "top_k", "top_p", "min_p"]
)
def test_greedy_sampling_mid_run_accepts_every_draft_of_an_identical_draft(client, identical_pair, change):
    """The draft of the identical pair proposes the target's most likely tokens. Sampled at temperature 1.5
    the target rejects some; from the cycle where sampling turns greedy on, it accepts every one."""
    load(client, identical_pair)

    def rejected(c: dict) -> bool:
        return c["accepted"] < c["drafted"]

    run = drive(
        client,
        PROMPTS[1],
        {"spec_type": "draft-simple", "draft_n_max": K},
        {"temp": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 5},
        [Step(sampling=change, ready=seen(rejected))],
        until=cycles(20),
    )
    before, after = run.phases()
    assert any(rejected(c) for c in before)
    assert all(c["drafted"] == K and c["accepted"] == K for c in after)


def test_a_spec_change_keeps_the_random_state_of_a_fixed_seed(client, pair):
    """At temperature 0.8 with a fixed seed, speculation does not change the text, whatever K is; so a K
    change mid-run must not either: only a sampling change rebuilds (and so reseeds) the sampler."""
    load(client, pair)
    sampling = {"temp": 0.8, "seed": 3}
    spec = {"spec_type": "draft-simple", "draft_n_max": K}
    run = drive(client, PROMPTS[1], spec, sampling, [Step({"draft_n_max": 2}, ready=cycles(5))], until=cycles(30))
    tokens = [t for c in run.cycles for t in c["tokens"]]
    assert tokens == generated(client, PROMPTS[1], len(tokens), sampling, spec)


# -- two changes, refused values --------------------------------------------------------------------
def test_two_changes_sent_together_both_take_effect(client, pair):
    """A change made while the previous one waits for the next cycle adds to it; it does not undo it."""
    load(client, pair)
    got, applied = [], []
    ev: dict = {}
    for ev in client.generate(PROMPTS[1], MAX_TOKENS, spec={"spec_type": "draft-simple", "draft_n_max": K}):
        if ev["event"] == "cycle":
            got.append(ev)
            if len(got) == 4:
                client.update(spec={"draft_n_max": 2})
                client.update(spec={"draft_p_min": 0.9})
            if len(applied) == 2 and len(got) == applied[-1]["from_cycle"] + 10:
                client.cancel()
        elif ev["event"] == "updated":
            applied.append(ev)
    assert ev["event"] == "cancelled" and len(applied) == 2
    assert [(u["spec"]["draft_n_max"], u["spec"]["draft_p_min"]) for u in applied] == [(2, 0.0), (2, 0.9)]
    assert all(c["k"] == 2 and c["drafted"] <= 2 for c in got[applied[0]["from_cycle"] :])


def refuse(client: EngineClient, pair, bad: list[tuple[dict, str]]) -> None:
    """Send each bad update in turn during one run: each is refused, by name, and the run goes on with its
    settings untouched (K drafted every cycle, one settings epoch) until cancelled."""
    load(client, pair)
    got: list[dict] = []
    errors: list[dict] = []
    sent: list[int] = []
    last_refused_at: int | None = None  # cycles read when the last refusal came
    ev: dict = {}
    for ev in client.generate(PROMPTS[1], MAX_TOKENS, spec={"spec_type": "draft-simple", "draft_n_max": K}):
        if ev["event"] == "cycle":
            got.append(ev)
            if len(errors) == len(sent) < len(bad) and len(got) >= 3:
                sent.append(client.update(**bad[len(sent)][0]))
            elif last_refused_at is not None and len(got) == last_refused_at + 10:
                client.cancel()
        elif ev["event"] == "error":
            errors.append(ev)
            if len(errors) == len(bad):
                last_refused_at = len(got)
        assert ev["event"] != "updated", ev
    assert ev["event"] == "cancelled"
    assert [e["id"] for e in errors] == sent
    for e, (update, words) in zip(errors, bad):
        assert e["kind"] == "invalid_settings" and words in e["message"], (update, e["message"])
    assert len({c["epoch"] for c in got}) == 1 and all(c["drafted"] == K for c in got[1:])


def test_values_out_of_range_are_refused_and_the_run_goes_on(client, pair):
    refuse(
        client,
        pair,
        [
            ({"spec": {"spec_type": "draft-nonsense"}}, "unknown speculative type"),
            ({"spec": {"spec_type": "none,draft-simple"}}, "cannot be combined"),
            ({"spec": {"draft_n_max": 65}}, "draft_n_max"),
            ({"spec": {"draft_n_min": K + 1}}, "draft_n_min"),
            ({"spec": {"draft_p_min": 1.5}}, "draft_p_min"),
            ({"spec": {"ngram_size_n": 0}}, "ngram_size_n"),
            ({"spec": {"ngram_size_m": 65}}, "ngram_size_m"),
            ({"spec": {"ngram_min_hits": 0}}, "ngram_min_hits"),
            ({"spec": {"ngram_mod_n_match": 0}}, "ngram_mod_n_match"),
            ({"spec": {"ngram_mod_n_min": 65}}, "ngram_mod_n_min"),
            ({"spec": {"ngram_mod_n_max": 0}}, "ngram_mod_n_max"),
            ({"spec": {"draft_n_maxx": 3}}, "draft_n_maxx"),
            ({"sampling": {"temp": -0.5}}, "temp"),
            ({"sampling": {"top_k": -1}}, "top_k"),
            ({"sampling": {"top_p": 0.0}}, "top_p"),
            ({"sampling": {"min_p": 1.5}}, "min_p"),
            ({"sampling": {"seed": -1}}, "seed"),
            ({"sampling": {"seed": 2**32}}, "seed"),
        ],
    )


def test_values_of_the_wrong_type_are_refused_and_the_run_goes_on(client, pair):
    """A string or None where a number belongs used to reach a comparison in the worker's main thread and
    end the worker; a float where an integer belongs reached ctypes and ended the run."""
    refuse(
        client,
        pair,
        [
            ({"spec": {"draft_p_min": "high"}}, "draft_p_min"),
            ({"spec": {"draft_n_max": 2.5}}, "draft_n_max"),
            ({"spec": {"spec_type": 5}}, "spec_type"),
            ({"spec": {"ngram_size_n": None}}, "ngram_size_n"),
            ({"sampling": {"seed": None}}, "seed"),
            ({"sampling": {"top_k": True}}, "top_k"),
            ({"sampling": {"temp": "0.5"}}, "temp"),
        ],
    )
