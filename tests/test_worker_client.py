"""The worker process behind engine.runtime.client: protocol, states, mid-run knobs, crashes, bad files."""

from __future__ import annotations

import os
import signal

import pytest

from engine.core.settings import LoadSettings
from engine.runtime import client as C
from engine.runtime.client import EngineClient, EngineCrashed, EngineError

from .conftest import PROMPTS


def load(client: EngineClient, pair, **kw) -> dict:
    target, draft = pair
    return client.load(LoadSettings(target, draft, ctx=kw.pop("ctx", 1024), **kw))


@pytest.mark.slow
def test_handshake_and_states(client, pair):
    assert client.state == C.READY
    assert client.hello["protocol"] == 1 and "llama.cpp" in client.hello["llama"]
    assert client.hello["devices"], "the worker reports llama.cpp's devices"
    ev = load(client, pair)
    assert ev["has_draft"] and ev["n_ctx"] >= 1024
    assert {m["model"] for m in ev["memory"]} == {"target", "draft"}
    assert client.state == C.READY
    states = []
    client.on_event = lambda e: states.append(e.get("state")) if e["event"] == "state" else None
    events = list(
        client.generate(PROMPTS[0], 32, spec={"spec_type": "draft-simple", "draft_n_max": 3}, sampling={"temp": 0.0})
    )
    assert events[0]["event"] == "started" and events[-1]["event"] == "done"
    assert C.RUNNING in states and states[-1] == C.READY
    cycles = [e for e in events if e["event"] == "cycle"]
    summary = events[-1]["summary"]
    assert summary["tokens_generated"] == sum(c["emitted"] for c in cycles) == 32
    assert summary["drafted"] == sum(c["drafted"] for c in cycles)
    assert summary["accepted"] == sum(c["accepted"] for c in cycles)
    assert summary["text"] == "".join(c["text"] for c in cycles)


@pytest.mark.slow
def test_load_reports_progress_for_target_then_draft(client, pair):
    seen = []
    client.on_event = lambda e: seen.append((e["stage"], e["progress"])) if e["event"] == "load_progress" else None
    load(client, pair)
    stages = [s for s, _ in seen]
    assert stages[0] == "loading" and stages[-1] == "loaded"
    for stage in ("target", "draft"):
        values = [v for s, v in seen if s == stage]
        assert len(values) >= 2 and values == sorted(values) and values[-1] == 1.0, (stage, values)
    # the target is read before the draft
    assert max(i for i, s in enumerate(stages) if s == "target") < min(i for i, s in enumerate(stages) if s == "draft")


def locked_kib(pid: int) -> int:
    """The process's locked memory (VmLck), in KiB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmLck:"))


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the locked memory from Linux's /proc")
@pytest.mark.skipif(os.geteuid() != 0, reason="locking a model needs CAP_IPC_LOCK or a large RLIMIT_MEMLOCK")
def test_lock_in_ram_locks_both_models_weights(client, pair):
    """A benchmark's models stay resident: the weights of target and draft are locked (VmLck), and a load
    without the setting locks nothing."""
    weights = sum(p.stat().st_size for p in pair) // 1024
    load(client, pair, lock_in_ram=True)
    assert locked_kib(client.pid) >= 0.9 * weights
    with EngineClient() as plain:
        plain.start()
        load(plain, pair)
        assert locked_kib(plain.pid) == 0


@pytest.mark.slow
def test_cancel_while_loading_stops_the_load_and_the_worker_goes_on(client, pair):
    target, draft = pair
    load(client, pair)  # a pair is loaded; a new load frees it first, so a cancelled one leaves none

    def cancel_once_loading(ev):
        # from the reader thread, as soon as the worker says the load has begun: it is mid-load now
        if ev["event"] == "load_progress" and ev["stage"] == "loading":
            client.cancel()

    client.on_event = cancel_once_loading
    with pytest.raises(EngineError) as info:
        client.load(LoadSettings(target, draft, ctx=2048))
    client.on_event = None
    assert info.value.kind == "cancelled" and "cancelled" in str(info.value)
    assert client.loaded is None and client.state == C.READY
    with pytest.raises(EngineError, match="no model is loaded"):
        list(client.generate(PROMPTS[0], 4))
    load(client, pair)  # and a load after it works
    assert list(client.generate(PROMPTS[0], 4))[-1]["event"] == "done"


@pytest.mark.slow
def test_knob_sent_mid_run_is_used_by_the_next_cycle(client, pair):
    load(client, pair)
    sent = False
    updated = None
    cycles = []
    after = None
    for ev in client.generate(
        PROMPTS[1], 100000, spec={"spec_type": "draft-simple", "draft_n_max": 6}, sampling={"temp": 0.0}
    ):
        if ev["event"] == "cycle":
            cycles.append(ev)
            if ev["i"] >= 3 and not sent:
                client.update(spec={"draft_n_max": 2})
                sent = True
            if after is not None and len(cycles) == after + 20:
                client.cancel()
        elif ev["event"] == "updated":
            updated = ev
            after = len(cycles)
    assert ev["event"] == "cancelled"
    assert updated is not None and updated["spec"]["draft_n_max"] == 2
    first_new = updated["from_cycle"]
    # the cycle right after the 'updated' event is the first to use the new K; none before it does
    assert after == first_new and cycles[first_new]["i"] == first_new
    assert all(c["k"] == 6 for c in cycles[:after])
    assert all(c["k"] == 2 and c["drafted"] <= 2 for c in cycles[after:])


@pytest.mark.slow
def test_bad_update_is_refused_and_the_run_goes_on(client, pair):
    load(client, pair)
    errors, cycles_after_error, last = [], 0, None
    for ev in client.generate(PROMPTS[0], 100000, spec={"spec_type": "draft-simple", "draft_n_max": 3}):
        if ev["event"] == "cycle":
            if ev["i"] == 2:
                client.update(spec={"draft_n_max": -4})
            if errors:
                cycles_after_error += 1
                if cycles_after_error == 10:
                    client.cancel()
        elif ev["event"] == "error":
            errors.append(ev)
        last = ev
    assert errors and errors[0]["kind"] == "invalid_settings" and "draft_n_max" in errors[0]["message"]
    assert cycles_after_error >= 10 and last["event"] == "cancelled"


@pytest.mark.slow
def test_cancel_mid_run(client, pair):
    load(client, pair)
    last = None
    for ev in client.generate(PROMPTS[0], 100000, spec={"spec_type": "draft-simple", "draft_n_max": 2}):
        if ev["event"] == "cycle" and ev["i"] == 5:
            client.cancel()
        last = ev
    assert last["event"] == "cancelled"
    assert last["summary"]["tokens_generated"] > 0
    assert client.state == C.READY


@pytest.mark.slow
def test_killed_worker_leaves_crashed_state_and_restart_works(client, pair):
    load(client, pair)
    pid = client.pid
    with pytest.raises(EngineCrashed) as exc:
        for ev in client.generate(PROMPTS[0], 100000, spec={"spec_type": "draft-simple", "draft_n_max": 2}):
            if ev["event"] == "cycle" and ev["i"] == 3:
                os.kill(pid, signal.SIGKILL)
    assert client.state == C.CRASHED
    assert "SIGKILL" in str(exc.value) and "SIGKILL" in client.last_error
    with pytest.raises(EngineCrashed):
        client.send("memory")
    client.restart()
    assert client.state == C.READY and client.pid != pid
    load(client, pair)
    events = list(client.generate(PROMPTS[0], 16, spec={"spec_type": "draft-simple"}))
    assert events[-1]["event"] == "done"


@pytest.mark.slow
def test_kill_from_another_thread_wakes_a_waiting_generation(client, pair):
    """A Cancel button may kill the engine while another thread waits in generate(): that thread
    must get an error at once, not wait forever for a "done" that will never come."""
    import threading
    import time

    load(client, pair)
    started = threading.Event()
    outcome: list = []

    def consume() -> None:
        try:
            for ev in client.generate(PROMPTS[0], 100000, spec={"spec_type": "draft-simple", "draft_n_max": 2}):
                if ev["event"] == "cycle":
                    started.set()
        except EngineCrashed as exc:
            outcome.append(exc)

    t = threading.Thread(target=consume)
    t.start()
    assert started.wait(60)
    t0 = time.monotonic()
    client.kill()
    t.join(30)
    assert not t.is_alive() and outcome and "stopped" in str(outcome[0])
    assert time.monotonic() - t0 < 10
    client.start()  # a stale "stopped" from the old process must not reach the new one
    assert client.state == C.READY


@pytest.mark.slow
def test_worker_abort_inside_llama_cpp_is_reported(client):
    """A native abort (here SIGABRT, as GGML_ASSERT raises) must not take the client with it."""
    os.kill(client.pid, signal.SIGABRT)
    with pytest.raises(EngineCrashed, match="SIGABRT"):
        client.wait_for(("never",), timeout=30)
    assert client.state == C.CRASHED


class SigillOnFirstLoad(EngineClient):
    """The real client, whose first load request meets a worker that dies of SIGILL, as the pinned
    llama.cpp does while it repacks weights on a CPU whose AMX the system does not enable.

    The worker is stopped before the request is written and gets SIGILL after: it dies with the
    request in its pipe, unanswered, however fast it would have loaded."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.sigill_sent_to: int | None = None

    def send(self, cmd: str, **fields) -> int:
        if cmd != "load" or self.sigill_sent_to is not None:
            return super().send(cmd, **fields)
        pid = self.sigill_sent_to = self.pid
        os.kill(pid, signal.SIGSTOP)
        req = super().send(cmd, **fields)
        os.kill(pid, signal.SIGILL)  # pending while it is stopped; delivered when it runs again
        os.kill(pid, signal.SIGCONT)
        return req


@pytest.mark.slow
def test_illegal_instruction_while_loading_reloads_without_repacking(pair):
    events: list[dict] = []
    with SigillOnFirstLoad(on_event=events.append) as client:
        client.start()
        first_pid = client.pid
        ev = load(client, pair, repack=True)
        assert client.sigill_sent_to == first_pid and client.pid != first_pid, "a fresh worker loaded the pair"
        crashed = [e for e in events if e["event"] == "crashed"]
        assert [e["exit_code"] for e in crashed] == [-signal.SIGILL]
        assert "SIGILL while loading" in crashed[0]["message"] and "--no-repack" in crashed[0]["message"]
        # the caller is told, and the worker really loaded with repacking off
        assert ev["event"] == "loaded" and ev["repack"] is False and ev["settings"]["repack"] is False
        assert "SIGILL" in ev["notice"] and "-nr" in ev["notice"]
        assert client.state == C.READY and client.loaded is not None
        assert list(client.generate(PROMPTS[0], 8, spec={"spec_type": "draft-simple"}))[-1]["event"] == "done"


def test_the_first_fault_names_the_crash_when_faulthandler_itself_faults():
    """Seen in CI: SIGILL arrived mid-JSON-decode, faulthandler faulted while printing, and the worker
    ended by SIGSEGV; the SIGILL that started it is what decides the repack fallback."""
    from engine.runtime.client import first_fault

    both = "Fatal Python error: Illegal instruction\n\nThread 0x1 ...\nFatal Python error: Segmentation fault\n"
    assert first_fault(-signal.SIGSEGV, both) == -signal.SIGILL
    assert first_fault(-signal.SIGSEGV, "Fatal Python error: Segmentation fault\n") == -signal.SIGSEGV
    assert first_fault(-signal.SIGKILL, "no faulthandler here") == -signal.SIGKILL
    assert first_fault(-signal.SIGSEGV, "Fatal Python error: something new\n") == -signal.SIGSEGV
    assert first_fault(1, both) == 1 and first_fault(None, both) is None


@pytest.mark.slow
@pytest.mark.parametrize("repack, fallback", [(False, True), (True, False)], ids=["repacking-off", "no-fallback"])
def test_illegal_instruction_is_not_retried_when_repacking_is_not_the_cause(pair, repack, fallback):
    """Only a load with repacking on is retried, once, and only when the caller allows it."""
    with SigillOnFirstLoad() as client:
        client.start()
        first_pid = client.pid
        with pytest.raises(EngineCrashed, match="SIGILL"):
            client.load(LoadSettings(*pair, ctx=1024, repack=repack), repack_fallback=fallback)
        assert client.state == C.CRASHED and client.pid == first_pid and client.loaded is None


@pytest.mark.slow
@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "too short"),
        (os.urandom(4096), "not a GGUF file"),
        (b"GGUF" + (7).to_bytes(4, "little") + bytes(16), "version 7"),
    ],
)
def test_broken_files_give_a_clear_error(client, tmp_path, content, message):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content)
    with pytest.raises(EngineError, match=message):
        client.load(LoadSettings(bad, None, ctx=256))
    assert client.state == C.ERROR
    assert client.pid is not None and client._proc.poll() is None, "the worker survives"


@pytest.mark.slow
def test_truncated_gguf(client, pair, tmp_path):
    target, _ = pair
    data = target.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(EngineError, match="truncated"):
        client.load(LoadSettings(cut, None, ctx=256))
    head_only = tmp_path / "head.gguf"
    head_only.write_bytes(data[:200])
    with pytest.raises(EngineError, match="damaged or truncated|truncated"):
        client.load(LoadSettings(head_only, None, ctx=256))
    load(client, pair)  # and the same worker still loads a good pair


@pytest.mark.slow
def test_incompatible_pair_is_explained(client, incompatible_pair):
    with pytest.raises(EngineError) as exc:
        load(client, incompatible_pair, ctx=256)
    assert exc.value.kind == "incompatible"
    assert "vocab" in str(exc.value)


@pytest.mark.slow
def test_busy_and_unknown_commands(client, pair):
    load(client, pair)
    req = client.start_generate(PROMPTS[0], 100000, spec={"spec_type": "draft-simple"})
    client.wait_for(("cycle",), req, timeout=60)
    with pytest.raises(EngineError, match="while a generate is running") as exc:
        client.wait_for(("memory",), client.send("memory"), timeout=30)
    assert exc.value.kind == "busy"
    client.cancel()
    client.wait_for(("cancelled",), req, timeout=60)
    with pytest.raises(EngineError) as exc:
        client.wait_for(("x",), client.send("frobnicate"), timeout=30)
    assert exc.value.kind == "unknown_command"
    assert client.memory()


@pytest.mark.slow
def test_protocol_version_mismatch_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(C.protocol, "PROTOCOL_VERSION", 999)
    c = EngineClient()
    with pytest.raises(EngineError) as exc:
        c.start()
    assert exc.value.kind == "version_mismatch"
    assert c.state == C.ERROR
    c.close()
