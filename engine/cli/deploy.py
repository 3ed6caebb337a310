"""The deployment commands of ``spectune``: export, validate and history.

  spectune export --target T [--draft D] [knobs] [--format bash|pwsh|cmd|vllm|sglang] [--server PATH]
  spectune validate --target T [--draft D] [knobs] (--prompt TEXT ... | --workload SET) [--json]
  spectune history [--limit N] [--kind K] | show ID | compare ID ID | export --csv FILE

``register(subparsers)`` adds them to the main parser (engine.cli.main). The exported
command is the last line of standard output; warnings go to standard error.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

from engine.cli.args import add_chat_args, add_knob_args, add_model_args, chat_from, settings_from
from engine.cli.errors import guarded
from engine.measure.history import KINDS, History, compare, flatten

SHELL_FORMATS = ("bash", "pwsh", "cmd")
ENGINE_FORMATS = ("vllm", "sglang")


def _error_types() -> tuple[type[BaseException], ...]:
    from engine.llama.install import LlamaInstallError
    from engine.llama.server import ServerError
    from engine.measure.history import HistoryError
    from engine.measure.validate import ValidateError
    from engine.runtime.client import EngineError

    # ValueError covers SettingsError, ExportError, DialectError, EngineExportError and the quoting refusals
    return (ValueError, OSError, EngineError, HistoryError, LlamaInstallError, ServerError, ValidateError)


_guarded = guarded(lazy=_error_types)


def _warn(messages: list[str]) -> None:
    for message in messages:
        print(f"spectune: warning: {message}", file=sys.stderr)


# -- export ---------------------------------------------------------------------------------


def cmd_export(a: argparse.Namespace) -> int:
    from engine.deploy.engines import engine_export
    from engine.deploy.export import export_llama_server
    from engine.deploy.shell_quote import bash_join, pwsh_warnings

    load, spec, sampling = settings_from(a, export=True)
    if a.format in ENGINE_FORMATS:
        if a.server is not None:
            _warn([f"--server is a llama-server binary; it does not apply to --format {a.format}"])
        result = engine_export(
            a.format,
            load,
            spec,
            sampling,
            target_model=a.hf_target,
            draft_model=a.hf_draft,
            tensor_parallel_size=a.tensor_parallel_size,
        )
        _warn(result.warnings)
        print(bash_join(result.argv))
        return 0
    if a.hf_target or a.hf_draft or a.tensor_parallel_size != 1:
        _warn(["--hf-target, --hf-draft and --tensor-parallel-size apply to --format vllm and sglang only"])
    exported = export_llama_server(load, spec, sampling, a.server)
    line = exported.line(a.format)  # refuses what the shell cannot carry, before any output
    print(
        f"spectune: note: written in the {exported.dialect} flag dialect, read from {exported.argv[0]} --help",
        file=sys.stderr,
    )
    _warn(exported.warnings + (pwsh_warnings(exported.argv) if a.format == "pwsh" else []))
    print(line)
    return 0


# -- validate -------------------------------------------------------------------------------


def cmd_validate(a: argparse.Namespace) -> int:
    from engine.measure.validate import format_report, load_prompts, record_validation, validate

    load, spec, sampling = settings_from(a)
    prompts = load_prompts(a.workload_prompts, a.prompt, chat=chat_from(a))
    report = validate(load, spec, sampling, prompts, a.max_tokens, passes=a.passes, sequential=a.sequential)
    _warn(report["warnings"])
    if not a.no_history:
        report["history_id"] = record_validation(report, load, spec, sampling)
    print(json.dumps(report) if a.json else format_report(report))
    return 0


# -- history --------------------------------------------------------------------------------


def _when(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def _cell(value: object, width: int) -> str:
    text = "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def cmd_history(a: argparse.Namespace) -> int:
    with History() as h:
        if a.history_command == "show":
            entry = h.get(a.id)
            if a.json:
                print(json.dumps(entry.to_dict()))
            else:
                for key, value in flatten(entry.to_dict()).items():
                    print(f"{key}: {_when(value) if key == 'created_at' else json.dumps(value)}")
            return 0
        if a.history_command == "compare":
            left, right = h.get(a.ids[0]), h.get(a.ids[1])
            rows = [r for r in compare(left, right) if a.all or r[1] != r[2]]
            if a.json:
                print(json.dumps([{"field": f, str(left.id): x, str(right.id): y} for f, x, y in rows]))
                return 0
            print(f"{'field':<40} {'#' + str(left.id):>24} {'#' + str(right.id):>24}")
            for field_name, x, y in rows:
                print(f"{_cell(field_name, 40):<40} {_cell(x, 24):>24} {_cell(y, 24):>24}")
            if not a.all:
                print(f"({len(rows)} fields differ; --all shows every field)")
            return 0
        if a.history_command == "export":
            count = h.export_csv(a.csv, kind=a.export_kind)
            print(f"wrote {count} entries to {a.csv}")
            return 0
        entries = h.entries(limit=a.limit, kind=a.kind)
    if a.list_json:
        print(json.dumps([e.to_dict() for e in entries]))
        return 0
    print(f"{'id':>5}  {'when':<19}  {'kind':<8} {'tok/s':>9} {'accept':>7}  {'spec':<22} target")
    for e in entries:
        spec_type = e.settings.get("spec", {}).get("spec_type")
        target = Path(e.target).name if e.target else "-"
        print(
            f"{e.id:>5}  {_when(e.created_at):<19}  {e.kind:<8} {_cell(e.tokens_per_s, 9):>9} "
            f"{_cell(e.acceptance_rate, 7):>7}  {_cell(spec_type, 22):<22} {target}"
        )
    return 0


# -- the parsers ------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add export, validate and history to the main parser's subcommands."""

    e = subparsers.add_parser("export", help="the llama-server (or vLLM / SGLang) command for these settings")
    add_model_args(e)
    add_knob_args(e)
    e.add_argument(
        "--format",
        choices=SHELL_FORMATS + ENGINE_FORMATS,
        default="bash",
        help="bash, pwsh or cmd: a llama-server command line for that shell; vllm or sglang: "
        "their serve command (bash)",
    )
    e.add_argument(
        "--server",
        help="the llama-server binary whose flag dialect to write (default: the bundled one); read from its --help",
    )
    e.add_argument(
        "--hf-target", help="vllm / sglang: the target's Hugging Face repo or directory (they do not take GGUF)"
    )
    e.add_argument("--hf-draft", help="vllm / sglang: the draft's Hugging Face repo or directory")
    e.add_argument("--tensor-parallel-size", type=int, default=1, help="vllm / sglang: GPUs per model (default 1)")
    e.set_defaults(func=_guarded(cmd_export))

    v = subparsers.add_parser(
        "validate", help="run the exported llama-server and the lab on the same prompts and compare them"
    )
    add_model_args(v)
    add_knob_args(v)
    v.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    v.add_argument(
        "--workload",
        "--workload-prompts",
        dest="workload_prompts",
        metavar="SET",
        help="a workload set: a JSON file, a JSONL file of chat requests, or a shipped set name",
    )
    add_chat_args(v)
    v.add_argument("--max-tokens", type=int, default=128)
    v.add_argument(
        "--passes",
        type=int,
        default=1,
        help="run every prompt on both this many times and compare the median speeds (default 1)",
    )
    v.add_argument(
        "--sequential",
        action="store_true",
        help="run all of llama-server's prompts, stop it, then the lab's, even when the pair fits "
        "twice in RAM (the default there is prompt by prompt, taking turns)",
    )
    v.add_argument("--json", action="store_true", help="print one JSON object: lab, server, agree, ratio, ...")
    v.add_argument("--no-history", action="store_true", help="do not store the result in the history")
    v.set_defaults(func=_guarded(cmd_validate))

    h = subparsers.add_parser("history", help="past runs and validations: list, show, compare, export")
    h.add_argument("--limit", type=int, default=20, help="list at most this many (default 20)")
    h.add_argument("--kind", choices=KINDS, help="list only this kind")
    h.add_argument("--json", dest="list_json", action="store_true", help="list as JSON")
    sub = h.add_subparsers(dest="history_command")
    show = sub.add_parser("show", help="one entry in full")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true")
    cmp = sub.add_parser("compare", help="two entries side by side")
    cmp.add_argument("ids", type=int, nargs=2, metavar="ID")
    cmp.add_argument("--all", action="store_true", help="show the fields that are equal as well")
    cmp.add_argument("--json", action="store_true")
    out = sub.add_parser("export", help="every entry as CSV")
    out.add_argument("--csv", type=Path, required=True, metavar="FILE")
    out.add_argument("--kind", dest="export_kind", choices=KINDS, help="export only this kind")
    h.set_defaults(func=_guarded(cmd_history), history_command=None)
