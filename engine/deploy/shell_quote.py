"""One argv list as a command line a person pastes into bash, PowerShell or cmd.

Launching never goes through these: SpecTune starts programs from argv lists.
These functions only render the exported command for a person to copy, and
each one is exact for its shell's documented parsing rules:

bash        Every word that is not plainly safe is single-quoted ('...'), an
            embedded ' written as '"'"'. Inside single quotes bash expands
            nothing: no $, `, \\, ! (history expansion stops at single quotes),
            globs or braces. A word holding a newline is written $'...' instead
            (only \\, ' and the newline escaped) so the command stays on one
            input line: interactive bash reads a line beginning with ^ as a
            ^old^new history substitution, even inside an open quote. The
            program word is also quoted when it would be read as an assignment
            (A=B) or a reserved word (if, time, ...). Beyond any quoting, so not
            made safe: a bare program name (no /) beginning with % is a job spec
            to bash even when quoted (refused), and one naming a builtin, alias
            or function runs that instead; give such a program as a path.

PowerShell  ``& 'program' arg ...``: the call operator runs a quoted program
            path; every argument that is not a plain flag or a small decimal
            integer is a single-quoted string, in which PowerShell expands
            nothing and a quote character is written twice. PowerShell counts
            four characters as single quotes (' U+2018 U+2019 U+201A U+201B),
            so each of them is doubled. What cannot be made safe here:
            PowerShell then re-quotes the arguments for the program's command
            line, and Windows PowerShell 5.1 and pwsh before 7.3 (or
            $PSNativeCommandArgumentPassing = 'Legacy') drop empty arguments and
            mangle embedded double quotes; ``pwsh_warnings`` says when an argv
            has either.

cmd         The program receives one command-line string and its C runtime
            splits it by the CommandLineToArgvW rules; cmd.exe reads that string
            first. So each argument is quoted for CommandLineToArgvW (wrapped in
            "...", a " written as \\", backslashes doubled only where they
            precede a "), and then every cmd metacharacter of the result
            (^ & | < > ( ) " % !) is escaped with ^, so cmd never enters its own
            quote mode and hands the string through unchanged. The program path
            stays in plain double quotes, in which cmd only expands % and !, so
            a program path holding ", % or ! is refused.
            The % problem: at an interactive prompt cmd expands %NAME% before it
            removes ^ escapes, and leaves an undefined name alone. Every % is
            therefore written ^% and the character after it ^-escaped too, so
            any name cmd could look up starts with ^, a name no one defines.
            Inside a batch file the rules differ (an undefined %NAME% becomes
            empty, %%/%1/%* are special): pass ``batch=True`` to write each % as
            %% instead. Not safe in either: delayed expansion (cmd /V:ON or
            setlocal EnableDelayedExpansion) treats ! specially after the ^
            escapes are gone; arguments holding a newline (a command line cannot
            carry one; refused); command lines over cmd's 8191-character limit
            (refused).
"""

from __future__ import annotations

import re

SHELLS = ("bash", "pwsh", "cmd")

# -- bash ----------------------------------------------------------------------------

_BASH_SAFE_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
_BASH_SAFE_PROGRAM = re.compile(r"[A-Za-z0-9_./+-]+")
_BASH_RESERVED = frozenset(
    "if then else elif fi case esac for select while until do done in function time coproc".split()
)


def _check_argv(argv: list[str]) -> None:
    if not argv:
        raise ValueError("an empty argv has no command line")
    for arg in argv:
        if "\0" in arg:
            raise ValueError(f"an argument holds a NUL character, which no command line can carry: {arg!r}")


def _ansi_c_quote(word: str) -> str:
    # $'...' keeps a newline off the line: a quoted line break followed by ^ would start
    # a new input line that interactive bash reads as a ^old^new history substitution
    return "$'" + word.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def bash_quote(word: str) -> str:
    """One bash word that reads back as ``word``."""
    if word and _BASH_SAFE_WORD.fullmatch(word):
        return word
    if "\n" in word:
        return _ansi_c_quote(word)
    return "'" + word.replace("'", "'\"'\"'") + "'"


def _bash_program(program: str) -> str:
    if not program:
        raise ValueError("the program name is empty")
    if program.startswith("%") and "/" not in program:
        raise ValueError(
            f"bash runs a command name beginning with % as a job spec, quoted or not: {program!r}; "
            "give the program as a path"
        )
    if _BASH_SAFE_PROGRAM.fullmatch(program) and program not in _BASH_RESERVED:
        return program
    if "\n" in program:
        return _ansi_c_quote(program)
    return "'" + program.replace("'", "'\"'\"'") + "'"


def bash_join(argv: list[str]) -> str:
    _check_argv(argv)
    return " ".join([_bash_program(argv[0])] + [bash_quote(a) for a in argv[1:]])


# -- PowerShell ---------------------------------------------------------------------

PWSH_SINGLE_QUOTES = "'\u2018\u2019\u201a\u201b"
# passed to a native program verbatim when unquoted: flags and small decimal integers
# (a longer number could be read as a double and re-rendered, 1e3 as 1000, 010 as 10)
_PWSH_BARE = re.compile(r"--?[A-Za-z][A-Za-z0-9-]*|0|[1-9][0-9]{0,8}")


def pwsh_quote(word: str) -> str:
    """A PowerShell single-quoted string whose value is ``word``."""
    return "'" + "".join(c + c if c in PWSH_SINGLE_QUOTES else c for c in word) + "'"


def pwsh_join(argv: list[str]) -> str:
    _check_argv(argv)
    args = [a if _PWSH_BARE.fullmatch(a) else pwsh_quote(a) for a in argv[1:]]
    return " ".join(["&", pwsh_quote(argv[0])] + args)


def pwsh_warnings(argv: list[str]) -> list[str]:
    """What older PowerShell versions pass wrongly to a native program."""
    problems = []
    if any(a == "" for a in argv[1:]):
        problems.append("an empty argument is dropped by Windows PowerShell 5.1 and pwsh < 7.3")
    if any('"' in a for a in argv[1:]):
        problems.append(
            'an argument holding " is passed wrongly by Windows PowerShell 5.1 and pwsh < 7.3 '
            "(use pwsh 7.3 or later, or the cmd form)"
        )
    return problems


# -- cmd ------------------------------------------------------------------------------

CMD_METACHARACTERS = '^&|<>()"%!'
CMD_MAX_LINE = 8191
_ARGV_NEEDS_QUOTES = re.compile(r'[\s"]')


def argv_quote(arg: str, *, force: bool = False) -> str:
    """One argument for a Windows command line, as CommandLineToArgvW splits it."""
    if arg and not force and not _ARGV_NEEDS_QUOTES.search(arg):
        return arg
    out = ['"']
    backslashes = 0
    for ch in arg:
        if ch == "\\":
            backslashes += 1
            continue
        if ch == '"':
            out.append("\\" * (2 * backslashes + 1) + '"')
        else:
            out.append("\\" * backslashes + ch)
        backslashes = 0
    out.append("\\" * (2 * backslashes) + '"')  # doubled: they now precede the closing quote
    return "".join(out)


def _cmd_escape(text: str, batch: bool) -> str:
    out = []
    after_percent = False
    for ch in text:
        if ch == "%" and batch:
            out.append("%%")
        elif ch in CMD_METACHARACTERS or after_percent:
            out.append("^" + ch)
        else:
            out.append(ch)
        # interactive: the character after a % is escaped as well, so a %NAME% lookup
        # always sees a name beginning with ^
        after_percent = ch == "%" and not batch
    return "".join(out)


def cmd_join(argv: list[str], *, batch: bool = False) -> str:
    """The command line for cmd.exe (interactive prompt, or a batch file with batch=True)."""
    _check_argv(argv)
    for arg in argv:
        if "\n" in arg or "\r" in arg:
            raise ValueError(f"cmd cannot pass an argument holding a line break: {arg!r}")
    program = argv[0]
    bad = [c for c in '"%!' if c in program]
    if bad:
        raise ValueError(f"cmd cannot run a program whose path holds {' or '.join(bad)}: {program!r}")
    parts = ['"' + program + '"']
    for arg in argv[1:]:
        # interactive: a quoted argument ends in ^", so a % is never followed by a space
        quoted = argv_quote(arg, force="%" in arg and not batch)
        parts.append(_cmd_escape(quoted, batch))
    line = " ".join(parts)
    if len(line) > CMD_MAX_LINE:
        raise ValueError(f"the command line is {len(line)} characters; cmd accepts at most {CMD_MAX_LINE}")
    return line


def join(argv: list[str], shell: str) -> str:
    """The command line for ``shell`` (bash, pwsh or cmd)."""
    if shell == "bash":
        return bash_join(argv)
    if shell == "pwsh":
        return pwsh_join(argv)
    if shell == "cmd":
        return cmd_join(argv)
    raise ValueError(f"unknown shell {shell!r}; known: {', '.join(SHELLS)}")
