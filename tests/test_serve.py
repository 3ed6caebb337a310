"""``spectune serve``: the bundled llama-server on the demo pair behind SpecTune's proxy, driven by real HTTP
clients (urllib, http.client, a raw socket), streams included; the fault tests kill real processes."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from engine.core.settings import LoadSettings, SamplingSettings, SettingsError, SpecSettings
from engine.core.workloads import load_workload
from engine.models.demo_models import demo_pair
from engine.serve.proxy import Proxy, ProxyError, Upstream
from engine.serve.record import Recorder
from engine.serve.session import METRICS_S, ServeSession, ServeSettings, wait_for_requests
from engine.serve.watch import Watch

pytestmark = pytest.mark.server

CHAT = {
    "messages": [{"role": "user", "content": "def add(a, b):"}],
    "max_tokens": 24,
    "temperature": 0,
    "cache_prompt": False,
}


def settings(**kw) -> ServeSettings:
    target, draft = demo_pair("f16")
    load = LoadSettings(target, draft, ctx=384)
    spec = SpecSettings("draft-simple", draft_n_max=3)
    return ServeSettings(load, spec, SamplingSettings(temp=0.0), port=0, **kw)


def post(url: str, body: object, key: str | None = None, timeout: float = 60) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def without_ids(answer: dict) -> dict:
    """An answer less what differs between two identical requests (its id, time and speed)."""
    return {k: v for k, v in answer.items() if k not in ("id", "created", "timings")}


def stream_events(port: int, body: dict, key: str | None = None) -> list[dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    conn.request("POST", "/v1/chat/completions", json.dumps({**body, "stream": True}), headers)
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/event-stream")
    raw = resp.read().decode()
    conn.close()
    return [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


@pytest.fixture
def served():
    with ServeSession(settings()) as session:
        yield session


def test_an_answer_passes_through_unchanged_and_its_timings_are_watched(served):
    status, via_proxy = post(served.proxy.url + "/v1/chat/completions", CHAT)
    direct_status, direct = post(served.server.base_url + "/v1/chat/completions", CHAT, key=served.server.api_key)
    assert status == direct_status == 200 and wait_for_requests(served, 1, timeout=30)
    assert without_ids(via_proxy) == without_ids(direct)  # text, usage, model: what the server said
    rec = served.watch.records()[0]
    t = via_proxy["timings"]
    assert (rec.status, rec.stream, rec.error) == (200, False, "")
    assert rec.generated_tokens == t["predicted_n"] == via_proxy["usage"]["completion_tokens"]
    assert (rec.drafted, rec.accepted) == (t["draft_n"], t["draft_n_accepted"]) and rec.drafted > 0
    assert rec.overlapped == 1 and served.watch.total == 1  # the direct request never passed the proxy


def test_a_stream_passes_through_event_by_event_and_its_last_event_gives_the_figures(served):
    whole = post(served.proxy.url + "/v1/chat/completions", CHAT)[1]
    events = stream_events(served.proxy.port, CHAT)
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))
    assert text == whole["choices"][0]["message"]["content"]  # greedy: the same answer, streamed
    assert wait_for_requests(served, 2, timeout=30)  # the record closes once the last byte has gone
    last = served.watch.records()[-1]
    assert last.stream and last.status == 200
    assert (last.drafted, last.accepted) == (
        events[-1]["timings"]["draft_n"],
        events[-1]["timings"]["draft_n_accepted"],
    )
    assert last.generated_tokens == events[-1]["timings"]["predicted_n"] > 0


def test_the_users_key_is_required_when_set_and_llama_servers_own_key_never_is():
    with ServeSession(settings(api_key="users-key")) as session:
        url = session.proxy.url + "/v1/chat/completions"
        assert post(url, CHAT)[0] == 401
        assert post(url, CHAT, key="wrong")[0] == 401
        assert post(url, CHAT, key=session.server.api_key)[0] == 401  # the inner key is not a way in
        assert post(url, CHAT, key="users-key")[0] == 200
        assert stream_events(session.proxy.port, CHAT, key="users-key")[-1]["timings"]["predicted_n"] > 0


def test_a_malformed_request_gets_llama_servers_own_error(served):
    bad = {"messages": "not a list"}
    status, via_proxy = post(served.proxy.url + "/v1/chat/completions", bad)
    direct_status, direct = post(served.server.base_url + "/v1/chat/completions", bad, key=served.server.api_key)
    assert status == direct_status == 400 and via_proxy == direct
    assert wait_for_requests(served, 1, timeout=30)
    rec = served.watch.records()[-1]
    assert rec.status == 400 and rec.error == direct["error"]["message"]
    status, broken = post(served.proxy.url + "/v1/chat/completions", b"{not json")
    assert status >= 400 and "error" in broken  # not JSON at all: still the server's answer


def test_a_client_that_leaves_mid_stream_leaves_the_proxy_and_the_server_healthy(served):
    body = json.dumps({**CHAT, "max_tokens": 300, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", served.proxy.port), timeout=60) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        got = b""
        while b"data: " not in got:  # the headers, then the stream's first event
            chunk = s.recv(4096)
            assert chunk, "the proxy closed the stream before its first event"
            got += chunk
    assert wait_for_requests(served, 1, timeout=60)
    gone = served.watch.records()[0]
    assert gone.error == "the client disconnected mid-answer" and gone.stream
    status, answer = post(served.proxy.url + "/v1/chat/completions", CHAT)
    assert status == 200 and answer["usage"]["completion_tokens"] > 0
    assert served.server_alive


def test_a_dying_server_is_reported_answers_503_with_why_and_restarts_with_the_recording_intact(tmp_path):
    events: list[dict] = []
    recording = tmp_path / "traffic.jsonl"
    with ServeSession(settings(record=recording), on_event=events.append) as session:
        assert post(session.proxy.url + "/v1/chat/completions", CHAT)[0] == 200
        os.kill(session.server.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not events and time.monotonic() < deadline:
            time.sleep(0.05)
        assert events and events[0]["kind"] == "server-exited" and events[0]["code"] == -signal.SIGKILL
        assert "llama_server" in events[0]["log"] or "srv" in events[0]["log"]  # its log's tail comes with it
        status, answer = post(session.proxy.url + "/v1/chat/completions", CHAT)
        assert status == 503 and "exited with status" in answer["error"]["message"]
        session.restart()
        assert events[-1]["kind"] == "restarted"
        assert post(session.proxy.url + "/v1/chat/completions", CHAT)[0] == 200
    lines = recording.read_text().splitlines()
    assert len(lines) == 3  # every chat request, the one the dead server could not answer included
    assert all(json.loads(line)["messages"] == CHAT["messages"] for line in lines)


def test_overlapping_requests_are_counted_as_such():
    with ServeSession(settings(parallel=2)) as session:
        assert "-np" in session.argv and session.argv[session.argv.index("-np") + 1] == "2"
        assert session.argv[session.argv.index("-c") + 1] == "768"  # each slot keeps its 384
        body = {**CHAT, "max_tokens": 64}
        threads = [
            threading.Thread(target=post, args=(session.proxy.url + "/v1/chat/completions", body)) for _ in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert wait_for_requests(session, 2, timeout=30)
        recs = session.watch.records()
        assert len(recs) == 2 and all(r.status == 200 for r in recs)
        assert [r.overlapped for r in recs] == [2, 2], "each request saw the other in flight"


def test_a_taken_port_fails_at_once_with_the_address_and_starts_no_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        session = ServeSession(settings())
        session.settings.port = session.proxy.port = port
        with pytest.raises(OSError, match=f"127.0.0.1:{port}"):
            session.start()
        assert session.server is None


def test_a_port_out_of_range_is_refused_before_anything_starts():
    out_of_range = settings()
    out_of_range.port = 99999
    with pytest.raises(SettingsError, match="between 1 and 65535.*99999"):
        ServeSession(out_of_range)
    # the proxy on its own says so too, rather than leaving its thread dead and its caller serving nothing
    with pytest.raises(ProxyError, match="127.0.0.1:70000"):
        Proxy(Upstream("http://127.0.0.1:9", None), Watch(), port=70000).start()


def test_a_recording_killed_mid_line_keeps_every_whole_line_and_says_what_it_dropped(tmp_path):
    path = tmp_path / "traffic.jsonl"
    with Recorder(path) as rec:
        assert rec.record({"messages": [{"role": "user", "content": "one"}]})
        assert rec.record({"messages": [{"role": "user", "content": "two"}]})
        assert not rec.record({"messages": "not a conversation"}) and rec.skipped == 1
    with path.open("ab") as fh:
        fh.write(b'{"messages": [{"role": "user", "con')  # what a kill in the middle of a write leaves
    w = load_workload(path)
    assert [p.text for p in w.prompts] == ["one", "two"]
    assert len(w.warnings) == 1 and "line 3" in w.warnings[0] and "cut off" in w.warnings[0]
    with Recorder(path) as rec:  # recording again on the same file
        assert rec.dropped == len(b'{"messages": [{"role": "user", "con')
        rec.record({"messages": [{"role": "user", "content": "three"}]})
    w = load_workload(path)
    assert [p.text for p in w.prompts] == ["one", "two", "three"] and not w.warnings


def test_the_serve_command_prints_the_url_and_a_json_line_per_request_and_records_through_a_kill(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    recording = tmp_path / "traffic.jsonl"
    argv = [sys.executable, "-m", "engine.cli", "serve", "--demo", "--ctx", "384", "--port", str(port)]
    argv += ["--record", str(recording), "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith(f"serving on http://127.0.0.1:{port}/v1"), first + proc.stderr.read()
        assert proc.stdout.readline().startswith("recording chat requests to")
        for _ in range(2):
            assert post(f"http://127.0.0.1:{port}/v1/chat/completions", CHAT)[0] == 200
            line = json.loads(proc.stdout.readline())
            assert line["status"] == 200 and line["generated_tokens"] > 0 and line["drafted"] > 0
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the command and its llama-server, as a crash takes them
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    w = load_workload(recording)
    assert len(w.prompts) == 2 and not w.warnings
    assert w.prompts[0].conversation is not None and w.prompts[0].conversation.messages == CHAT["messages"]


def test_the_proxy_refuses_nothing_it_does_not_watch(served):
    """Any other path (the server's own pages and APIs) passes through too: /health, /v1/models, /metrics."""
    with urllib.request.urlopen(served.proxy.url + "/health", timeout=30) as resp:
        assert resp.status == 200 and json.loads(resp.read())["status"] == "ok"
    with urllib.request.urlopen(served.proxy.url + "/v1/models", timeout=30) as resp:
        assert Path(json.loads(resp.read())["data"][0]["id"]).name.startswith("spectune-demo-target")
    post(served.proxy.url + "/v1/chat/completions", CHAT)
    assert wait_for_requests(served, 1, timeout=30)
    with urllib.request.urlopen(served.proxy.url + "/metrics", timeout=30) as resp:
        assert b"llamacpp:" in resp.read()
    assert served.watch.total == 1  # only the completion was watched


def test_llama_servers_own_counters_agree_with_the_requests_and_give_acceptance_by_position(served):
    """/metrics adds what the per-request timings cannot: how far into a draft acceptance reaches."""
    for prompt in ("def add(a, b):", "class Stack:"):
        body = {**CHAT, "messages": [{"role": "user", "content": prompt}]}
        assert post(served.proxy.url + "/v1/chat/completions", body)[0] == 200
    assert wait_for_requests(served, 2, timeout=30)
    drafted = sum(r.drafted for r in served.watch.records())
    accepted = sum(r.accepted for r in served.watch.records())
    deadline = time.monotonic() + 3 * METRICS_S
    while time.monotonic() < deadline and (served.watch.counters is None or served.watch.counters.drafted < drafted):
        time.sleep(0.2)
    counters = served.watch.counters
    assert counters is not None and (counters.drafted, counters.accepted) == (drafted, accepted) and drafted > 0
    reach = counters.reach()
    assert 1 <= len(reach) <= 3 and all(a >= b for a, b in zip(reach, reach[1:]))  # K=3; each needs the one before
    assert sum(counters.accepted_by_position) == accepted
    assert counters.line().startswith("drafts accepted up to position 1: ")
