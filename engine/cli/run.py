"""The measuring commands of ``spectune``: run, demo, tune, server-path, and gui (which starts the app).

spectune run (--target T.gguf [--draft D.gguf] | --demo) [knobs] (--prompt TEXT | --prompt-file F | --workload W)
spectune tune --target T --draft D (--workload W | --prompt P ...)
spectune demo [--json]; spectune server-path; spectune gui [--demo]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from engine.cli.args import add_chat_args, add_engine_args, add_knob_args, add_model_args, chat_from, settings_from
from engine.core.chat import Conversation, Prompt
from engine.core.settings import LoadSettings, SamplingSettings, SettingsError, SpecSettings, to_dict
from engine.measure.generate import PromptRun, run_prompts, summarise
from engine.measure.quick_check import MAX_TOKENS as QUICK_TOKENS
from engine.runtime.client import EngineClient
from engine.runtime.events import CycleEvent, Event


def _cycle_line(ev: CycleEvent) -> str:
    if ev["prompt"]:
        return f"prompt  {ev['n_prompt']:5d} tokens  {ev['cycle_ms']:8.2f} ms"
    bar = "#" * ev["accepted"] + "." * (ev["drafted"] - ev["accepted"])
    return (
        f"cycle {ev['i']:5d}  K={ev['k']:<2d} drafted {ev['drafted']:2d} accepted {ev['accepted']:2d} "
        f"[{bar:<{max(ev['k'], 1)}}]  draft {ev['draft_ms']:7.2f} ms  verify {ev['verify_ms']:7.2f} ms  "
        f"{json.dumps(ev['text'])}"
    )


def _print_summary(s: dict, out=sys.stdout) -> None:
    print(
        f"tokens {s['tokens_generated']}  {s['tokens_per_s']:.1f} tok/s  acceptance {s['acceptance_rate']:.3f} "
        f"({s['accepted']}/{s['drafted']})  mean accepted length {s['mean_accepted_length']:.2f}  "
        f"steps {s['steps']}",
        file=out,
    )
    if s["acceptance_by_position"]:
        print("acceptance by position: " + " ".join(f"{x:.2f}" for x in s["acceptance_by_position"]), file=out)
    print(f"time: draft {s['draft_ms']:.1f} ms  verify {s['verify_ms']:.1f} ms  other {s['other_ms']:.1f} ms", file=out)
    if "speedup" in s:
        print(f"baseline {s['baseline_tokens_per_s']:.1f} tok/s  speedup {s['speedup']:.3f}x", file=out)


def _record(kind: str, load: LoadSettings, spec: SpecSettings, sampling: SamplingSettings, summary: dict) -> None:
    """Keep the result in the history; a history that cannot be written must not lose the printed result."""
    from engine.measure.history import HistoryError, record_summary

    try:
        record_summary(kind, load, spec, sampling, summary)
    except (HistoryError, OSError) as exc:
        print(f"spectune: warning: the run was not saved to the history: {exc}", file=sys.stderr)


def _run_prompts(a: argparse.Namespace) -> tuple[str | None, list[tuple[str, Prompt]]]:
    """(workload name or None, [(prompt id, prompt)]) from --prompt, --prompt-file or --workload,
    as raw text or as conversations (chat mode)."""
    if a.workload:
        w = _workload(a)
        return w.name, w.id_prompts(chat=True if w.has_conversations else chat_from(a))
    text = Path(a.prompt_file).read_text(encoding="utf-8") if a.prompt_file else a.prompt
    if not text:
        raise SettingsError("the prompt is empty")
    return None, [("prompt", Conversation.user(text) if chat_from(a) else text)]


def _workload(a: argparse.Namespace):
    """The --workload set; a set of conversations with --raw is refused (it has no raw text)."""
    from engine.core.workloads import load_workload

    w = load_workload(a.workload)
    for warning in w.warnings:  # a recording's cut-off last line
        print(f"spectune: warning: {warning}", file=sys.stderr)
    if w.has_conversations and getattr(a, "chat_mode", "auto") == "raw":
        raise SettingsError(f"{w.name} holds conversations: they run in chat mode only (leave out --raw)")
    return w


class LoadProgressLine:
    """``loading target  42 %`` on one terminal line, rewritten in place; nothing when not a terminal
    (a script reading stderr wants the warnings, not a progress bar)."""

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.active = bool(getattr(self.stream, "isatty", lambda: False)())
        self._shown = ""

    def __call__(self, ev: Event) -> None:
        if not self.active or ev["event"] != "load_progress":
            return
        stage = ev["stage"]
        if stage in ("target", "draft"):
            text = f"loading {stage} {ev['progress'] * 100:3.0f} %"
            if text != self._shown:
                self.stream.write("\r" + text)
                self.stream.flush()
                self._shown = text
        elif stage == "loaded":
            self.clear()

    def clear(self) -> None:
        """Wipe the line (loaded, or failed: an error message must not be appended to it)."""
        if self._shown:
            self.stream.write("\r" + " " * len(self._shown) + "\r")
            self.stream.flush()
            self._shown = ""


def started_engine(a: argparse.Namespace) -> EngineClient:
    """An engine client for --engine / --server, started; when SpecTune's own engine cannot start here and
    --engine is auto, it runs through llama-server and a note on stderr says why."""
    client = EngineClient(engine=getattr(a, "engine", "auto"), server=getattr(a, "server", None))
    try:
        client.start()
    except BaseException:
        client.close()
        raise
    if client.native_failure:
        print(f"spectune: note: {client.native_failure} Measuring through llama-server.", file=sys.stderr)
    return client


def engine_fields(client: EngineClient) -> dict:
    """What a JSON result says about the engine that measured it."""
    out: dict = {"engine": client.engine_kind}
    if client.native_failure:
        out["native_failure"] = client.native_failure
    return out


@contextmanager
def _loaded_engine(load: LoadSettings, a: argparse.Namespace) -> Iterator[tuple[EngineClient, LoadSettings]]:
    """A started engine with the pair loaded, and the settings it loaded with; the engine stops on leaving."""
    with started_engine(a) as client:
        yield client, _load(client, load)


def _load(client: EngineClient, load: LoadSettings) -> LoadSettings:
    """Load the pair; returns the settings actually used (the client may have had to turn repacking off)."""
    previous = client.on_event
    show = LoadProgressLine()

    def on_event(ev: Event) -> None:
        show(ev)
        if previous is not None:
            previous(ev)

    client.on_event = on_event if show.active else previous
    try:
        loaded = client.load(load)
    finally:
        client.on_event = previous
        show.clear()
    if loaded.get("notice"):
        print(f"spectune: warning: {loaded['notice']}", file=sys.stderr)
    if loaded.get("repack") is False and load.repack:
        load = replace(load, repack=False)
    return load


def cmd_run(a: argparse.Namespace) -> int:
    load, spec, sampling = settings_from(a)
    workload, prompts = _run_prompts(a)
    # --events: every cycle as JSON; a plain single run: one line per cycle; otherwise quiet
    cycle_text: Callable[[CycleEvent], str] | None = (
        json.dumps if a.events else _cycle_line if not a.json and workload is None else None
    )

    def print_cycle(ev: Event) -> None:
        if cycle_text is not None and ev["event"] == "cycle":
            print(cycle_text(ev), flush=True)

    on_event = print_cycle if cycle_text else None

    def print_prompt(run: PromptRun) -> None:
        s, base = run.summary, run.baseline
        extra = f"  baseline {base['tokens_per_s']:.1f} tok/s" if base else ""
        print(
            f"{run.id:<28} {s['tokens_generated']:4d} tokens  {s['tokens_per_s']:8.1f} tok/s  "
            f"acceptance {s['acceptance_rate']:.3f} ({s['accepted']}/{s['drafted']}){extra}",
            flush=True,
        )

    with _loaded_engine(load, a) as (client, load):
        engine = engine_fields(client)
        runs = run_prompts(
            client,
            prompts,
            a.max_tokens,
            spec,
            sampling,
            baseline=a.baseline,
            on_event=on_event,
            on_prompt=print_prompt if workload is not None and not (a.json or a.events) else None,
        )
    summary = summarise(runs, workload)
    summary["target"] = str(load.target)
    summary["draft"] = str(load.draft) if load.draft else None
    summary["spec"] = to_dict(spec)
    summary["sampling"] = to_dict(sampling)
    summary.update(engine)
    _record("run", load, spec, sampling, summary)
    if a.json:
        print(json.dumps(summary))
    elif not a.events:
        if workload is not None:
            print(f"workload {workload}: {len(runs)} prompts")
        _print_summary(summary)
    return 0


def _prompts_from(a: argparse.Namespace) -> list[Prompt]:
    if getattr(a, "prompt", None):
        chat = chat_from(a)
        return [Conversation.user(p) if chat else p for p in a.prompt]
    w = _workload(a)
    return w.to_run(chat=True if w.has_conversations else chat_from(a))


def _clients(a: argparse.Namespace) -> int | None:
    """--clients, or the concurrency a recording (spectune serve --record) saw when it saw more than one."""
    if a.clients is not None:
        if a.clients < 1:
            raise SettingsError(f"--clients must be at least 1, not {a.clients}")
        return a.clients
    if a.workload and Path(a.workload).expanduser().is_file():
        from engine.serve.record import recorded_concurrency

        seen = recorded_concurrency(a.workload)
        if seen is not None and seen > 1:
            print(
                f"spectune: note: the recording saw {seen} requests at once; tuning at --clients {seen}",
                file=sys.stderr,
            )
            return seen
    return None


def cmd_tune(a: argparse.Namespace) -> int:
    from engine.measure.tuner import Tuner

    load, spec, sampling = settings_from(a)
    prompts = _prompts_from(a)
    clients = _clients(a)
    if clients is not None:
        return _tune_concurrent(a, load, spec, sampling, prompts, clients)
    with _loaded_engine(load, a) as (client, load):
        engine = engine_fields(client)
        result = Tuner(
            client,
            load,
            prompts,
            max_tokens=a.max_tokens,
            sampling=sampling,
            budget_s=a.budget_s,
            seed=a.seed_tune,
            k_max=a.k_max,
        ).run()
    record = result.to_dict()
    out = {**record, **engine}
    _record("tune", load, result.best.spec, sampling, out)
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"{'setting':<40} {'predicted':>10} {'measured':>10} {'error':>7} {'prompts':>7}")
    for row in record["candidates"]:
        pred = f"{row['predicted_tps']:.1f}" if row["predicted_tps"] else "-"
        meas = f"{row['measured_tps']:.1f}" if row["measured_tps"] else "-"
        err = f"{100 * row['error']:+.1f}%" if row["error"] is not None else "-"
        print(f"{row['setting']:<40} {pred:>10} {meas:>10} {err:>7} {row['prompts']:>7}")
    print(
        f"baseline {record['baseline_tps']:.1f} tok/s; the search picked {record['best']['setting']} "
        f"({record['best']['measured_tps'] or 0.0:.1f} tok/s there) in {record['elapsed_s']:.0f} s "
        f"({record['runs']} runs); checked against no speculation:"
    )
    print(record["verdict_text"])
    if not record["beats_baseline"]:
        print("(leave out --spec-type and the draft model)")
    if record["raise_k"]:
        print(record["raise_k"].replace("raise K max", "raise --k-max") + ".")
    return 0


def _tune_concurrent(a, load, spec, sampling, prompts: list[Prompt], clients: int) -> int:
    """spectune tune --clients N: through llama-server at -np N, each setting paired with no speculation."""
    from engine.deploy.shell_quote import bash_join
    from engine.measure.concurrent_tune import candidate_specs, predicted_k, tune_concurrent

    extra = spec if a.spec_type else None  # a setting the user named joins the candidates
    result = tune_concurrent(
        load,
        prompts,
        clients,
        sampling=sampling,
        max_tokens=a.max_tokens,
        rounds=a.rounds,
        specs=candidate_specs(load, extra, predicted_k(load, clients)),
        server=a.server,
        progress=(lambda m: None) if a.json else (lambda m: print(f"  {m}", file=sys.stderr, flush=True)),
    )
    out = result.to_dict()
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"{'setting':<28} {'aggregate':>10} {'baseline':>9} {'per client':>10} {'acceptance':>10}  ratio (interval)")
    for c in result.candidates:
        acc = f"{c.acceptance:.0%}" if c.acceptance is not None else "-"
        ratio = c.ratio.describe() if c.ratio else "-"
        speeds = f"{c.aggregate_tps:>10.1f} {c.baseline_tps:>9.1f} {c.per_client_tps:>10.1f}"
        print(f"{c.label:<28} {speeds} {acc:>10}  {ratio}")
    print(result.verdict_text())
    print("the command at this concurrency:")
    print(bash_join(result.export_argv))
    return 0


def cmd_server_path(a: argparse.Namespace) -> int:
    from engine.llama.install import server_path

    print(server_path())
    return 0


def cmd_demo(a: argparse.Namespace) -> int:
    from engine.measure.demo import run_demo

    return run_demo(json_output=a.json, max_tokens=a.max_tokens, quick=a.quick, engine=a.engine, server=a.server)


def cmd_gui(a: argparse.Namespace) -> int:
    """Start the desktop app as its own process (``python -m app``): the engine never imports the app."""
    argv = [sys.executable, "-m", "app", *(["--demo"] if a.demo else [])]
    return subprocess.call(argv)


def register(sub: argparse._SubParsersAction) -> None:
    """Add run, demo, tune, server-path and gui to the main parser's subcommands."""
    r = sub.add_parser("run", help="run one generation with live per-cycle statistics")
    add_model_args(r)
    add_knob_args(r)
    src = r.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt")
    src.add_argument("--prompt-file", type=Path)
    src.add_argument(
        "--workload",
        help="every prompt of a workload set, by name (resources/workloads) or file; the summary adds them up",
    )
    add_chat_args(r)
    add_engine_args(r)
    r.add_argument("--max-tokens", type=int, default=128)
    r.add_argument("--baseline", action="store_true", help="also run without speculation and report the speedup")
    out = r.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON summary at the end")
    out.add_argument("--events", action="store_true", help="print one JSON line per cycle")
    r.set_defaults(func=cmd_run)

    d = sub.add_parser("demo", help="the app's demo, headless: which setting pays on the bundled demo pair")
    d.add_argument("--json", action="store_true", help="end with one JSON object summarising the demo")
    d.add_argument(
        "--max-tokens",
        type=int,
        default=QUICK_TOKENS,
        help=f"tokens a run (default {QUICK_TOKENS}: the Lab's max tokens, which the app's check measures with)",
    )
    d.add_argument("--quick", action="store_true", help="two rounds instead of three")
    add_engine_args(d)
    d.set_defaults(func=cmd_demo)

    t = sub.add_parser("tune", help="find the fastest setting: cost model first, then real runs")
    add_model_args(t)
    add_knob_args(t)
    src = t.add_mutually_exclusive_group(required=True)
    src.add_argument("--workload", help="a workload set by name (see resources/workloads) or a file")
    src.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    add_chat_args(t)
    add_engine_args(t)
    t.add_argument("--max-tokens", type=int, default=128)
    t.add_argument("--budget-s", type=float, default=300.0, help="stop confirming after this many seconds")
    t.add_argument("--seed-tune", type=int, default=0, help="seed for prompt order and tie-breaks")
    t.add_argument("--k-max", type=int, default=12)
    t.add_argument(
        "--clients",
        type=int,
        default=None,
        metavar="N",
        help="tune through llama-server with -np N and N requests at once, each setting paired against no "
        "speculation at the same N (default: one client in SpecTune's engine; a recording made by "
        "`spectune serve --record` that saw several requests at once sets N itself)",
    )
    t.add_argument("--rounds", type=int, default=2, help="with --clients: how many times each prompt is sent")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_tune)

    s = sub.add_parser("server-path", help="print the bundled llama-server's path")
    s.set_defaults(func=cmd_server_path)

    g = sub.add_parser("gui", help="start the desktop app")
    g.add_argument("--demo", action="store_true", help="load the demo pair, measure a baseline and start a run")
    g.set_defaults(func=cmd_gui)
