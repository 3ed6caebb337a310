"""Quoting per shell: the command line must parse back to the same argv.

bash is run for real (a script with history expansion switched on, the program a
real executable at the generated path). pwsh and cmd are not on this machine:
their command lines are parsed back by the independent re-implementations of
their documented rules below.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from engine.deploy.shell_quote import CMD_MAX_LINE, argv_quote, bash_join, cmd_join, join, pwsh_join, pwsh_warnings

BASH = shutil.which("bash")
# the characters shells care about, plus non-ASCII and PowerShell's typographic quotes
TRICKY = list(" '\"%$!^&`\\*?[]{}~#;|<>()=,:@\t") + [
    "a",
    "Z",
    "0",
    "-",
    ".",
    "é",
    "漢",
    "\u2018",
    "\u2019",
    "\u201a",
    "\u201b",
    "\U0001f600",
    "!!",
    "%PATH%",
    "%PATH:a=b%",
    "$(id)",
    "`id`",
    "${HOME}",
]
ANY_CHAR = st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")

words = st.one_of(st.lists(st.sampled_from(TRICKY), max_size=8).map("".join), st.text(ANY_CHAR, max_size=16))
argument_lists = st.lists(st.one_of(words, st.text(ANY_CHAR, max_size=3).map(lambda s: s + "\n" + s)), max_size=6)
file_names = st.one_of(
    st.lists(st.sampled_from([c for c in TRICKY if "/" not in c]), min_size=1, max_size=8).map("".join),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0/"), min_size=1, max_size=16),
)

HYPOTHESIS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- bash: the real thing --------------------------------------------------------------------

PRINT_ARGS = '#!/bin/bash\nprintf \'%s\\0\' "$0" "$@"\n'


def _run_bash(script_body: str) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "line.sh"
        # history expansion on, and a previous command for !! to find: an unprotected ! would show
        script.write_bytes(("set -o history -H\n: previous command\n" + script_body + "\n").encode("utf-8"))
        proc = subprocess.run(
            [BASH, str(script)],
            capture_output=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin", "HOME": tmp, "LC_ALL": "C.UTF-8"},
        )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout.decode("utf-8", errors="surrogateescape").split("\0")[:-1]


@pytest.fixture(scope="module")
def program_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("programs")


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@HYPOTHESIS
@given(name=file_names, args=argument_lists)
def test_bash_command_line_runs_the_program_with_the_same_argv(program_dir, name, args):
    assume(name not in (".", "..") and len(name.encode()) < 200)
    directory = Path(tempfile.mkdtemp(dir=program_dir))
    program = directory / name
    program.write_text(PRINT_ARGS)
    program.chmod(0o755)
    argv = [str(program)] + args
    assert _run_bash(bash_join(argv)) == argv


BASH_BUILTINS = (
    set(subprocess.run([BASH, "-c", "compgen -b"], capture_output=True, text=True).stdout.split()) if BASH else set()
)
COMMAND_NAMES = st.one_of(
    st.sampled_from(
        [
            "if",
            "then",
            "time",
            "coproc",
            "function",
            "!",
            "{",
            "}",
            "[[",
            "A=B",
            "x=1",
            "#x",
            "~x",
            "a b",
            "é=1",
            "llama-server",
            "while",
            "!!",
        ]
    ),
    file_names,
)


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@HYPOTHESIS
@given(name=COMMAND_NAMES, args=argument_lists)
def test_bash_bare_program_name_reaches_command_lookup_unchanged(name, args):
    # a bare name is looked up on PATH; with an empty PATH bash hands it to command_not_found_handle
    assume(name not in BASH_BUILTINS and not name.startswith("%") and name != "command_not_found_handle")
    line = bash_join([name] + args)
    body = "command_not_found_handle() { printf '%s\\0' \"$@\"; return 0; }\nPATH=/nonexistent-spectune\n" + line
    assert _run_bash(body) == [name] + args


def test_bash_refuses_a_bare_program_name_bash_takes_for_a_job():
    with pytest.raises(ValueError, match="job spec"):
        bash_join(["%1", "-m", "x"])
    assert bash_join(["./%1", "-m"]) == "'./%1' -m"


def test_bash_leaves_plain_words_bare():
    assert (
        bash_join(["/usr/bin/llama-server", "-m", "/models/a.gguf", "--temp", "0.7"])
        == "/usr/bin/llama-server -m /models/a.gguf --temp 0.7"
    )
    assert bash_join(["A=B/x", "it's"]) == "'A=B/x' 'it'\"'\"'s'"


# -- PowerShell: an independent parser of its single-quoted strings ------------------------

# PowerShell's tokenizer takes all four as single quotes (its IsSingleQuote)
PWSH_QUOTE_CHARS = "'\u2018\u2019\u201a\u201b"
_PWSH_BAREWORD = re.compile(r"-{0,2}[A-Za-z0-9][A-Za-z0-9-]*")


def parse_pwsh(line: str) -> list[str]:
    """PowerShell's reading of ``& 'program' args``: single-quoted strings (a doubled quote
    character stands for the second of the pair; four characters count as quotes) and
    plain barewords, separated by spaces."""
    assert line.startswith("& "), line
    i, args = 2, []
    while i < len(line):
        if line[i] == " ":
            i += 1
            continue
        if line[i] in PWSH_QUOTE_CHARS:
            i += 1
            value = []
            while True:
                ch = line[i]  # IndexError: an unterminated string
                if ch in PWSH_QUOTE_CHARS:
                    if i + 1 < len(line) and line[i + 1] in PWSH_QUOTE_CHARS:
                        value.append(line[i + 1])
                        i += 2
                        continue
                    i += 1
                    break
                value.append(ch)
                i += 1
            assert i == len(line) or line[i] == " ", "a string must end its argument"
            args.append("".join(value))
        else:
            end = line.find(" ", i)
            end = len(line) if end < 0 else end
            word = line[i:end]
            assert _PWSH_BAREWORD.fullmatch(word), f"bareword {word!r} could mean something to PowerShell"
            assert not re.fullmatch(r"[0-9]+", word) or len(word) < 10, "a long number could be re-rendered"
            args.append(word)
            i = end
    return args


@HYPOTHESIS
@given(program=words.filter(bool), args=argument_lists)
def test_pwsh_command_line_parses_back_to_the_argv(program, args):
    line = pwsh_join([program] + args)
    assert line.startswith("& '")  # the call operator runs a quoted program
    assert parse_pwsh(line) == [program] + args


def test_pwsh_doubles_every_kind_of_single_quote():
    assert (
        pwsh_join(["C:\\Program Files\\llama-server.exe", "-m", "it's \u2019q\u2019", "-c", "4096", "0.95"])
        == "& 'C:\\Program Files\\llama-server.exe' -m 'it''s \u2019\u2019q\u2019\u2019' -c 4096 '0.95'"
    )


def test_pwsh_warns_where_old_powershell_passes_arguments_wrongly():
    assert pwsh_warnings(["x", "-m", "a.gguf"]) == []
    problems = pwsh_warnings(["x", "", 'say "hi"'])
    assert len(problems) == 2 and "empty" in problems[0] and '"' in problems[1]


# -- cmd: cmd.exe's reading, then CommandLineToArgvW's ------------------------------------------


def _defined(name: str) -> bool:
    """Adversarial environment: every variable is defined unless its name starts with ^."""
    return bool(name) and not name.startswith("^")


def cmd_percent_phase_interactive(line: str) -> str:
    """Phase 1 at the prompt: %NAME% (or %NAME:...%) of a defined NAME is replaced; anything else stays."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "%":
            close = line.find("%", i + 1)
            if close > 0 and _defined(line[i + 1 : close].split(":", 1)[0]):
                out.append("<EXPANDED>")
                i = close + 1
                continue
        out.append(line[i])
        i += 1
    return "".join(out)


def cmd_percent_phase_batch(line: str) -> str:
    """Phase 1 in a batch file: %% is %, %0-%9 / %* / %~ are arguments, %NAME% a variable (else nothing)."""
    out, i = [], 0
    while i < len(line):
        if line[i] != "%":
            out.append(line[i])
            i += 1
            continue
        nxt = line[i + 1 : i + 2]
        if nxt == "%":
            out.append("%")
            i += 2
        elif nxt and (nxt.isdigit() or nxt in "*~"):
            out.append("<ARG>")
            i += 2
        else:
            close = line.find("%", i + 1)
            if close < 0:
                i += 1  # a lone % is dropped
            else:
                out.append("<EXPANDED>" if _defined(line[i + 1 : close].split(":", 1)[0]) else "")
                i = close + 1
    return "".join(out)


def cmd_caret_phase(line: str) -> str:
    """Phase 2: outside quotes ^ takes the next character literally and & | < > ( ) must not occur
    unescaped; " toggles quoting (unless escaped), inside which everything is literal."""
    out, quoted, i = [], False, 0
    while i < len(line):
        ch = line[i]
        if ch == '"':
            quoted = not quoted
            out.append(ch)
        elif quoted:
            out.append(ch)
        elif ch == "^":
            assert i + 1 < len(line), "a trailing ^ continues the line"
            out.append(line[i + 1])
            i += 1
        else:
            assert ch not in "&|<>()", f"unescaped cmd metacharacter {ch!r} in {line!r}"
            out.append(ch)
        i += 1
    assert not quoted, "unbalanced quotes"
    return "".join(out)


def command_line_to_argv(line: str) -> list[str]:
    """CommandLineToArgvW as documented (with the post-2008 "" rule inside quotes)."""
    args, n = [], len(line)
    if line.startswith('"'):
        end = line.index('"', 1)  # argv[0]: up to the next quote, no escapes
        args.append(line[1:end])
        i = end + 1
    else:
        i = 0
        while i < n and line[i] not in " \t":
            i += 1
        args.append(line[:i])
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            return args
        value, quoted = [], False
        while i < n:
            ch = line[i]
            if ch == "\\":
                run_end = i
                while run_end < n and line[run_end] == "\\":
                    run_end += 1
                count = run_end - i
                if run_end < n and line[run_end] == '"':
                    value.append("\\" * (count // 2))
                    if count % 2:
                        value.append('"')
                        run_end += 1
                    i = run_end
                else:
                    value.append("\\" * count)
                    i = run_end
                continue
            if ch == '"':
                if quoted and i + 1 < n and line[i + 1] == '"':
                    value.append('"')
                    i += 2
                    continue
                quoted = not quoted
                i += 1
                continue
            if ch in " \t" and not quoted:
                break
            value.append(ch)
            i += 1
        args.append("".join(value))


cmd_programs = st.one_of(
    st.sampled_from(
        ["C:\\Program Files\\llama.cpp\\llama-server.exe", "llama-server", "C:\\a&b (x86)\\^caret^\\llama server.exe"]
    ),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters='\0"%!\r\n'), min_size=1, max_size=16),
)
cmd_words = st.one_of(
    st.lists(st.sampled_from(TRICKY + ["\\", "\\\\", '\\"', "a\\"]), max_size=8).map("".join),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0\r\n"), max_size=16),
)


@HYPOTHESIS
@given(program=cmd_programs, args=st.lists(cmd_words, max_size=6))
def test_cmd_interactive_line_reaches_the_program_as_the_same_argv(program, args):
    line = cmd_join([program] + args)
    assert command_line_to_argv(cmd_caret_phase(cmd_percent_phase_interactive(line))) == [program] + args


@HYPOTHESIS
@given(program=cmd_programs, args=st.lists(cmd_words, max_size=6))
def test_cmd_batch_line_reaches_the_program_as_the_same_argv(program, args):
    line = cmd_join([program] + args, batch=True)
    assert command_line_to_argv(cmd_caret_phase(cmd_percent_phase_batch(line))) == [program] + args


@HYPOTHESIS
@given(arg=cmd_words)
def test_argv_quoting_alone_follows_command_line_to_argv(arg):
    assert command_line_to_argv('"p" ' + argv_quote(arg)) == ["p", arg]


def test_cmd_escapes_the_percent_problem_and_refuses_what_it_cannot_carry():
    line = cmd_join(["C:\\llama\\llama-server.exe", "-m", "C:\\100% models\\%PATH%.gguf"])
    assert line == '"C:\\llama\\llama-server.exe" -m ^"C:\\100^%^ models\\^%^PATH^%^.gguf^"'
    with pytest.raises(ValueError, match="line break"):
        cmd_join(["x.exe", "a\nb"])
    with pytest.raises(ValueError, match="%"):
        cmd_join(["C:\\100%\\x.exe"])
    with pytest.raises(ValueError, match="at most"):
        cmd_join(["x.exe", "a" * CMD_MAX_LINE])


def test_join_names_its_shells():
    argv = ["llama-server", "-m", "a b.gguf"]
    assert join(argv, "bash") == bash_join(argv)
    assert join(argv, "pwsh") == pwsh_join(argv)
    assert join(argv, "cmd") == cmd_join(argv)
    with pytest.raises(ValueError, match="unknown shell"):
        join(argv, "fish")
    with pytest.raises(ValueError, match="NUL"):
        join(["x", "a\0b"], "bash")


def test_bash_round_trip_of_an_exported_windows_like_path():
    if BASH is None:
        pytest.skip("bash is not installed")
    args = ["-m", 'C:\\Users\\Zoë O\'Neil\\models\\100% "best" $HOME !! `id` ^&.gguf', ""]
    line = bash_join(["llama-server"] + args)
    body = "command_not_found_handle() { printf '%s\\0' \"$@\"; return 0; }\nPATH=/nonexistent-spectune\n" + line
    assert _run_bash(body) == ["llama-server"] + args
