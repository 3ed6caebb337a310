"""What a llama-server binary says about itself: its build (``--version``) and the devices its backends
found (``--list-devices``), for the hello of a worker that measures through llama-server."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

# "  CUDA0: NVIDIA H200 (143156 MiB, 142506 MiB free)"
_DEVICE = re.compile(
    r"^\s+(?P<name>[A-Za-z][\w]*): (?P<desc>.*?)(?: \((?P<total>\d+) MiB, (?P<free>\d+) MiB free\))?\s*$"
)
_VERSION = re.compile(r"^version: (?P<version>.+)$", re.M)
TIMEOUT_S = 60.0


def _output(path: Path, flag: str) -> str:
    try:
        proc = subprocess.run(
            [str(path), flag],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{path} {flag} failed: {exc}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-8:])
        raise RuntimeError(f"{path} {flag} exited with status {proc.returncode}:\n{tail}")
    return proc.stdout + proc.stderr


def parse_devices(text: str) -> list[dict[str, str]]:
    """The devices of ``--list-devices`` output: name, description (and MiB total / free where given)."""
    out = []
    listing = False
    for line in text.splitlines():
        if line.strip().startswith("Available devices"):
            listing = True
            continue
        m = _DEVICE.match(line) if listing else None
        if m:
            dev = {"name": m["name"], "description": m["desc"]}
            if m["total"]:
                dev |= {"total_mib": m["total"], "free_mib": m["free"]}
            out.append(dev)
    return out


def list_devices(path: Path) -> tuple[list[dict[str, str]], str]:
    """(devices, build line) of this llama-server. A build that lists no device runs on the CPU: the CPU is
    listed then, as the native engine's hello lists it."""
    devices = parse_devices(_output(path, "--list-devices"))
    version = _VERSION.search(_output(path, "--version"))
    if not any(d["name"].upper().startswith("CPU") for d in devices):
        devices.append({"name": "CPU", "description": "the CPU backend"})
    return devices, f"llama-server {version['version'].strip() if version else '(unknown version)'} at {path}"
