"""Which flag dialect a llama-server binary speaks, read from its --help.

llama-server's speculative flags changed twice (the dialects below), and a build
says no build number (`--version` of a pip build prints "build 1"), so the only
reliable witness is the option list in its own --help:

pre-rename  before b8955: --draft-max / --draft-min / --draft-p-min, -md; a draft
            model alone turns draft speculation on; where --spec-type exists it
            names the n-gram types only, which share --spec-ngram-size-n /
            -size-m / -min-hits, and ngram-mod reads its lookup length from
            --spec-ngram-size-n and its n-min / n-max from --draft-min / --draft-max.
renamed     b8955 to b9131: --spec-draft-n-max / -n-min / -p-min, per-type
            --spec-ngram-<type>-* flags, and the old type names draft, eagle3.
current     since b9131: the same flags with the type names draft-simple,
            draft-eagle3 (the pinned llama.cpp; common/arg.cpp options
            "--spec-type", "--spec-draft-n-max", "--spec-draft-n-min",
            "--spec-draft-p-min", "--spec-draft-model" / "-md",
            "--spec-draft-ngl" / "-ngld", "--spec-ngram-<simple|map-k|map-k4v>-*",
            "--spec-ngram-mod-n-match" / "-n-min" / "-n-max").

The current --help still lists the removed spellings (--draft-max, ...) with the
text "the argument has been removed", so a flag counts only when its entry does
not say that.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from engine.core.paths import cache_dir
from engine.core.settings import SPEC_TYPES

HELP_TIMEOUT_S = 60.0
_FLAG = r"-{1,2}[A-Za-z0-9][A-Za-z0-9_-]*"
_OPTION_LINE = re.compile(rf"^((?:{_FLAG},\s*)*{_FLAG})(.*)$")
_DEFAULT = re.compile(r"\(default: ([^,)]*)")
_TYPE_NAME = re.compile(r"[a-z][a-z0-9-]*")

OLD_TYPE_NAMES = {"draft-simple": "draft", "draft-eagle3": "eagle3"}  # before b9131
NGRAM_FAMILY = ("ngram-simple", "ngram-map-k", "ngram-map-k4v")
CURRENT_NGRAM_PREFIX = {"ngram-simple": "simple", "ngram-map-k": "map-k", "ngram-map-k4v": "map-k4v"}


class DialectError(ValueError):
    """The binary's flag dialect cannot be read; the message says why."""


@dataclass(frozen=True)
class HelpOption:
    names: tuple[str, ...]
    value_hint: str
    description: str

    @property
    def removed(self) -> bool:
        return "has been removed" in self.description


@dataclass(frozen=True)
class ServerHelp:
    options: tuple[HelpOption, ...]
    text: str = field(repr=False, default="")

    def option(self, flag: str) -> HelpOption | None:
        for opt in self.options:
            if flag in opt.names:
                return opt
        return None

    def has(self, flag: str) -> bool:
        """The binary accepts ``flag`` (listed, and not marked removed)."""
        opt = self.option(flag)
        return opt is not None and not opt.removed

    def default_of(self, flag: str) -> str | None:
        """The "(default: X)" the help states for ``flag``, or None."""
        opt = self.option(flag)
        m = _DEFAULT.search(opt.description) if opt else None
        return m.group(1).strip() if m else None

    @property
    def spec_type_names(self) -> tuple[str, ...] | None:
        """The names --spec-type lists in its value hint; None without --spec-type or a list."""
        opt = self.option("--spec-type")
        if opt is None or opt.removed:
            return None
        names = tuple(n for n in re.split(r"[,|\[\]{}<>\s]+", opt.value_hint) if _TYPE_NAME.fullmatch(n))
        return names or None


def parse_help(text: str) -> ServerHelp:
    """The options of a llama.cpp --help text (llama.cpp's common_arg layout)."""
    options: list[HelpOption] = []
    current: list | None = None  # [names, hint, description lines]

    def flush() -> None:
        if current is not None:
            options.append(HelpOption(tuple(current[0]), current[1], " ".join(current[2]).strip()))

    for line in text.splitlines():
        if not line.strip() or line.startswith("-----"):
            flush()
            current = None
            continue
        if line[0].isspace():
            if current is not None:
                current[2].append(line.strip())
            continue
        m = _OPTION_LINE.match(line)
        if m is None:
            flush()
            current = None
            continue
        flush()
        names = [n.strip() for n in m.group(1).split(",")]
        rest = m.group(2)
        hint, description = "", rest.strip()
        if rest.startswith(" ") and not rest.startswith("  "):
            hint, _, description = rest[1:].partition("  ")
        current = [names, hint.strip(), [description.strip()]]
    flush()
    return ServerHelp(tuple(options), text)


@dataclass(frozen=True)
class ServerDialect:
    """How one llama-server build spells SpecTune's settings."""

    name: str  # "current" | "renamed" | "pre-rename"
    spec_types: dict[str, str]  # SpecTune type -> the name --spec-type takes
    implied_by_draft_model: frozenset[str]  # types turned on by -md alone (pre-rename)
    draft_n_max_flag: str
    draft_n_min_flag: str
    draft_p_min_flag: str
    per_type_ngram_flags: bool  # --spec-ngram-simple-size-n ...; else shared --spec-ngram-size-n ...
    own_ngram_mod_flags: bool  # --spec-ngram-mod-n-*; else shared with size-n / draft-min / draft-max
    server_help: ServerHelp | None = field(default=None, repr=False)  # None: the pinned build, known unasked

    def accepts(self, flag: str) -> bool:
        return self.server_help is None or self.server_help.has(flag)

    def default_of(self, flag: str) -> str | None:
        return None if self.server_help is None else self.server_help.default_of(flag)


CURRENT = ServerDialect(
    name="current",
    spec_types={t: t for t in SPEC_TYPES},
    implied_by_draft_model=frozenset(),
    draft_n_max_flag="--spec-draft-n-max",
    draft_n_min_flag="--spec-draft-n-min",
    draft_p_min_flag="--spec-draft-p-min",
    per_type_ngram_flags=True,
    own_ngram_mod_flags=True,
)


def _type_map(listed: tuple[str, ...] | None, old_names: bool) -> dict[str, str]:
    mapping = {}
    for ours in SPEC_TYPES:
        theirs = OLD_TYPE_NAMES.get(ours, ours) if old_names else ours
        if listed is None or theirs in listed:
            mapping[ours] = theirs
    return mapping


def detect_dialect(server_help: ServerHelp) -> ServerDialect:
    listed = server_help.spec_type_names
    if server_help.has("--spec-draft-n-max"):
        # the type rename (b9131) came after the flag rename: the listed names tell which side
        old_names = listed is not None and "draft" in listed and "draft-simple" not in listed
        return ServerDialect(
            name="renamed" if old_names else "current",
            spec_types=_type_map(listed, old_names),
            implied_by_draft_model=frozenset(),
            draft_n_max_flag="--spec-draft-n-max",
            draft_n_min_flag="--spec-draft-n-min",
            draft_p_min_flag="--spec-draft-p-min",
            per_type_ngram_flags=server_help.has("--spec-ngram-simple-size-n"),
            own_ngram_mod_flags=server_help.has("--spec-ngram-mod-n-match"),
            server_help=server_help,
        )
    if server_help.has("--draft-max"):
        spec_types = {}
        if server_help.has("--spec-type"):
            # pre-rename --spec-type names the n-gram types; draft types only where listed
            spec_types = {
                t: n
                for t, n in _type_map(listed, old_names=True).items()
                if listed is not None or t.startswith("ngram-")
            }
        return ServerDialect(
            name="pre-rename",
            spec_types=spec_types,
            implied_by_draft_model=frozenset() if "draft-simple" in spec_types else frozenset({"draft-simple"}),
            draft_n_max_flag="--draft-max",
            draft_n_min_flag="--draft-min",
            draft_p_min_flag="--draft-p-min",
            per_type_ngram_flags=False,
            own_ngram_mod_flags=server_help.has("--spec-ngram-mod-n-match"),
            server_help=server_help,
        )
    raise DialectError(
        "its --help lists neither --spec-draft-n-max (current llama.cpp) nor --draft-max "
        "(older builds): not a llama-server with speculative decoding"
    )


# -- reading a binary's --help, cached by path, mtime and size ----------------------------

_help_cache: dict[tuple[str, int, int], ServerHelp] = {}


def resolve_server(server: str | Path | None) -> Path:
    """The binary to ask: the bundled llama-server by default, a PATH name, or a file."""
    if server is None:
        from engine.llama.install import server_path

        return server_path()
    path = Path(server)
    if not path.exists() and os.sep not in str(server) and "/" not in str(server):
        found = shutil.which(str(server))
        if found:
            path = Path(found)
    if not path.is_file():
        raise DialectError(f"llama-server not found: {server}")
    return path


def _disk_cache_dir() -> Path:

    return cache_dir() / "server-help"


def _run_help(path: Path) -> str:
    try:
        proc = subprocess.run(
            [str(path), "--help"],
            capture_output=True,
            text=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
            timeout=HELP_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise DialectError(f"{path} --help did not finish within {HELP_TIMEOUT_S:.0f} s") from None
    except OSError as exc:
        raise DialectError(f"cannot run {path} --help: {exc.strerror or exc}") from None
    text = proc.stdout + proc.stderr
    if not parse_help(text).options:
        tail = "\n".join(text.strip().splitlines()[-5:])
        raise DialectError(f"{path} --help (exit status {proc.returncode}) listed no options:\n{tail}")
    return text


def read_help(server: str | Path | None = None) -> ServerHelp:
    """The parsed --help of ``server``, from the cache while the file is unchanged."""
    path = resolve_server(server)
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key in _help_cache:
        return _help_cache[key]
    cache_file = _disk_cache_dir() / (hashlib.sha256(repr(key).encode()).hexdigest()[:32] + ".txt")
    try:
        text = cache_file.read_text(encoding="utf-8")
    except OSError:
        text = _run_help(path)
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            partial = cache_file.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(text, encoding="utf-8")
            os.replace(partial, cache_file)  # atomic: a concurrent reader never sees half a help text
        except OSError:
            pass  # a read-only cache only costs the next caller one more --help
    parsed = _help_cache[key] = parse_help(text)
    return parsed


def server_dialect(server: str | Path | None = None) -> ServerDialect:
    return detect_dialect(read_help(server))
