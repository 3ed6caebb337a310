"""What the engine worker has loaded, and the four ways that a library load can kill it, each checked.

    .venv/bin/python bench/loaded_objects.py [--python PY] [--pythonpath DIR] [--env K=V ...] [--ld-debug FILE]

Starts SpecTune's engine worker (engine.runtime.worker, as EngineClient does) with the given interpreter and
PYTHONPATH (bench/gpu_check.sh's layout: python3 + a site-packages folder), waits for its hello (libspecrt
and the backend modules are loaded then), and reads every shared object mapped into it from /proc/PID/maps.
It prints one line per object (where it came from, its SONAME, its TLS) and a verdict for each hypothesis of
issue 48 about the H200's SIGSEGV inside dlopen(libspecrt) (bench/results/gpu_check-2026-12-04-1332.txt):

1. a second copy of libggml, libggml-base, libllama or libllama-common (two files with one SONAME, or one
   library under two names);
2. a libstdc++, libgcc_s, libgomp, OpenMP or OpenSSL that came from a wheel rather than the system;
3. a library with initial-exec (static) TLS, which dlopen must fit into the static TLS block that is left;
4. a symbol libspecrt exports that another loaded object also exports (the loader would bind one to the other).

With --ld-debug FILE the worker runs under LD_DEBUG=files,libs and the loader's log goes to FILE.<pid>: the
order in which each object was opened and its initialiser called.
The exit status is 1 when a hypothesis is confirmed (something to fix), 0 when all are refuted.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.runtime.client import EngineClient  # noqa: E402

LLAMA_LIBS = ("libggml", "libggml-base", "libllama", "libllama-common", "libspecrt")
STD_PREFIXES = ("_ZNSt", "_ZNKSt", "_ZSt", "_ZNSs", "_ZNSa")
RUNTIME_LIBS = ("libstdc++", "libgcc_s", "libgomp", "libiomp", "libomp", "libssl", "libcrypto")


@dataclass
class SharedObject:
    path: str
    soname: str
    static_tls: bool  # DF_STATIC_TLS: initial-exec TLS the loader must place in the static block
    tls_bytes: int  # size of its PT_TLS segment (0: none)

    @property
    def stem(self) -> str:
        """libggml-base.so.0.25.3 -> libggml-base"""
        return re.sub(r"\.so(\..*)?$", "", Path(self.soname or self.path).name)

    @property
    def from_wheel(self) -> bool:
        return "site-packages" in self.path or ".libs" in Path(self.path).parent.name


def mapped_objects(pid: int) -> list[str]:
    """The shared objects mapped into a process, in the order they first appear in its maps."""
    seen: dict[str, None] = {}
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and ".so" in parts[5] and parts[5].startswith("/"):
            seen.setdefault(parts[5].removesuffix(" (deleted)"), None)
    return list(seen)


def _readelf(flag: str, path: str) -> str:
    return subprocess.run(["readelf", flag, "-W", path], capture_output=True, text=True).stdout


def describe(path: str) -> SharedObject:
    dynamic = _readelf("-d", path)
    soname = re.search(r"\(SONAME\)\s+Library soname: \[(.+?)\]", dynamic)
    flags = " ".join(re.findall(r"\(FLAGS\)\s+(.+)", dynamic))
    tls = re.search(r"^\s*TLS\s+\S+\s+\S+\s+\S+\s+\S+\s+(0x[0-9a-f]+)", _readelf("-l", path), re.M)
    return SharedObject(
        path, soname.group(1) if soname else "", "STATIC_TLS" in flags, int(tls.group(1), 16) if tls else 0
    )


def exported(path: str) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True).stdout
    return {f[2] for line in out.splitlines() if len(f := line.split()) == 3 and f[1] in "TWDBRVi"}


def verdicts(objects: list[SharedObject]) -> list[tuple[str, bool, str]]:
    """(hypothesis, confirmed, evidence) for the four hypotheses."""
    out = []
    by_stem: dict[str, list[SharedObject]] = {}
    for o in objects:
        by_stem.setdefault(o.stem, []).append(o)
    llama = {s: v for s, v in by_stem.items() if s in LLAMA_LIBS}
    real = {s: {os.path.realpath(o.path) for o in v} for s, v in llama.items()}
    twice = {s: sorted(p) for s, p in real.items() if len(p) > 1}
    out.append(
        (
            "1 a second copy of a llama.cpp library",
            bool(twice),
            "; ".join(f"{s}: {p}" for s, p in twice.items())
            or "one file each: " + ", ".join(f"{s} {next(iter(p))}" for s, p in sorted(real.items())),
        )
    )
    runtime = [o for o in objects if o.stem.split(".")[0] in RUNTIME_LIBS or o.stem in RUNTIME_LIBS]
    wheel = [o for o in runtime if o.from_wheel]
    out.append(
        (
            "2 a C++/OpenMP/OpenSSL runtime from a wheel",
            bool(wheel),
            ", ".join(o.path for o in wheel) or "all from the system: " + ", ".join(o.path for o in runtime),
        )
    )
    static = [o for o in objects if o.static_tls]
    late = [o for o in static if o.stem in LLAMA_LIBS or "ggml" in o.stem]
    out.append(
        (
            "3 initial-exec TLS in a library that is dlopen'ed",
            bool(late),
            ("llama.cpp's own: " + ", ".join(o.path for o in late) + "; " if late else "")
            + "static TLS users: "
            + (", ".join(f"{Path(o.path).name} ({o.tls_bytes} B)" for o in static) or "none"),
        )
    )
    specrt = next((o for o in objects if o.stem == "libspecrt"), None)
    clashes: dict[str, list[str]] = {}
    std_instances: dict[str, list[str]] = {}
    shared_with_llama = 0
    if specrt is not None:
        mine = exported(specrt.path)
        for o in objects:
            if o is specrt or o.stem in ("libc", "libm", "ld-linux-x86-64", "libstdc++", "libgcc_s"):
                continue
            both = mine & exported(o.path)
            if o.stem in LLAMA_LIBS:
                # C++ template instances (std::vector<std::string> ...) that every library built from these
                # headers carries: one definition by the one-definition rule, whichever copy the loader binds
                shared_with_llama = max(shared_with_llama, len(both))
                continue
            for sym in both:
                # std:: template instances (vague linkage) are one definition under the one-definition rule; they
                # are counted apart, and the loader's bindings (gpu_crash_repro.sh) show where they go
                (std_instances if sym.startswith(STD_PREFIXES) else clashes).setdefault(sym, []).append(
                    Path(o.path).name
                )
    out.append(
        (
            "4 a symbol libspecrt exports that another object (not llama.cpp's) also exports",
            bool(clashes),
            "; ".join(f"{s} also in {', '.join(v)}" for s, v in sorted(clashes.items())[:20])
            or (
                f"none of libspecrt's {len(exported(specrt.path))} exports is defined outside llama.cpp's "
                f"libraries but for {len(std_instances)} std:: template instance(s) "
                + (
                    f"({'; '.join(f'{k} in {v[0]}' for k, v in sorted(std_instances.items())[:3])}) "
                    if std_instances
                    else ""
                )
                + f"(up to {shared_with_llama} such instances are shared with llama.cpp's own libraries, as any "
                "two libraries built from the same headers share them)"
                if specrt
                else "libspecrt not loaded"
            ),
        )
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=sys.executable, help="the interpreter the worker runs in")
    ap.add_argument("--pythonpath", default="", help="prepended to PYTHONPATH (gpu_check.sh's site-packages)")
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="more environment for the worker")
    ap.add_argument("--ld-debug", type=Path, help="run under LD_DEBUG=files,libs, its log to FILE.<pid>")
    a = ap.parse_args()
    env = dict(os.environ)
    if a.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [a.pythonpath, env.get("PYTHONPATH", "")]))
    env.update(kv.split("=", 1) for kv in a.env)
    if a.ld_debug:
        env |= {"LD_DEBUG": "files,libs", "LD_DEBUG_OUTPUT": str(a.ld_debug)}
    with EngineClient(python=a.python, env=env, engine="native", stderr_lines=200) as client:
        try:
            hello = client.start(timeout=300)
        except Exception as exc:
            print(f"the worker did not start: {exc}\n{client.stderr_tail}")
            return 2
        paths = mapped_objects(client.pid)
        print(
            f"# worker {client.pid}: {a.python} ({hello['llama'][:60]}); "
            f"devices {[d['name'] for d in hello['devices']]}"
        )
        print(f"# {len(paths)} shared objects mapped, in the order they appear in /proc/{client.pid}/maps")
        objects = [describe(p) for p in paths]
        for o in objects:
            tls = f"TLS {o.tls_bytes} B{' static' if o.static_tls else ''}" if o.tls_bytes or o.static_tls else ""
            print(f"  {o.path}  [{o.soname or '-'}] {'wheel' if o.from_wheel else 'system'} {tls}".rstrip())
        confirmed = False
        for name, yes, evidence in verdicts(objects):
            confirmed |= yes
            print(f"hypothesis {name}: {'CONFIRMED' if yes else 'refuted'}: {evidence}")
    return 1 if confirmed else 0


if __name__ == "__main__":
    raise SystemExit(main())
