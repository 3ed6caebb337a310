"""Starts one llama-server (Linux, or Windows under Wine), sends it one /completion request and
prints the answer's counts as one JSON line. Used by packaging/wine_check.sh.

    python server_check.py --port 18431 [--stdin-file LINE.txt] [--timeout 300] -- ARGV...

ARGV is started as an argv list (never through a shell). With --stdin-file the file's text is
written to the program's standard input: `wine cmd` then runs the exported cmd line as if it had
been pasted at a cmd prompt. The server must listen on 127.0.0.1 at --port (the caller puts
--host/--port in ARGV or in the line). The process is ended (terminate, then kill) before this
exits; a Wine caller also ends its own prefix's wineserver afterwards, for the children of cmd.
Standard library only, so it runs under any Python 3.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

PROMPT = "def fibonacci(n):"


def _get(url: str, timeout: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--stdin-file")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--log", help="file for the server's output")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    base = f"http://127.0.0.1:{a.port}"
    log = open(a.log, "wb") if a.log else subprocess.DEVNULL
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE if a.stdin_file else subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
    )
    if a.stdin_file:
        assert proc.stdin is not None
        with open(a.stdin_file, "rb") as fh:
            proc.stdin.write(fh.read())
        proc.stdin.close()  # cmd reads the line, runs it, and waits for the server to end
    out: dict = {"argv": argv}
    try:
        while True:
            if proc.poll() is not None:  # (cmd.exe ends when the server it started has ended)
                out["error"] = f"the server exited with code {proc.returncode} before it was ready"
                break
            if time.monotonic() - t0 > a.timeout:
                out["error"] = f"not ready after {a.timeout:.0f} s"
                break
            try:
                status, _ = _get(base + "/health", 2)
            except OSError:
                status = 0
            if status == 200:
                break
            time.sleep(0.5)
        if "error" not in out:
            out["ready_s"] = round(time.monotonic() - t0, 1)
            body = {
                "prompt": PROMPT,
                "n_predict": a.n_predict,
                "temperature": 0,
                "top_k": 40,
                "top_p": 0.95,
                "min_p": 0.05,
                "cache_prompt": False,
            }
            req = urllib.request.Request(
                base + "/completion", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
            )
            t1 = time.monotonic()
            with urllib.request.urlopen(req, timeout=a.timeout) as r:
                res = json.loads(r.read())
            out["request_s"] = round(time.monotonic() - t1, 2)
            timings = res.get("timings", {})
            out.update(
                tokens_generated=timings.get("predicted_n"),
                drafted=timings.get("draft_n"),
                accepted=timings.get("draft_n_accepted"),
                tokens_per_s=round(timings.get("predicted_per_second") or 0.0, 1),
                text=res.get("content"),
            )
            status, props = _get(base + "/props", 10)
            if status == 200:
                out["build_info"] = json.loads(props).get("build_info")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    print(json.dumps(out))
    return 0 if "error" not in out else 1


if __name__ == "__main__":
    sys.exit(main())
