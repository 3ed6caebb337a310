"""What the proxy sees of each request, and the rolling view over the last ones.

Each answer of llama-server's completion endpoints carries ``timings``: prompt and generated
tokens, the generation's speed, and, when a draft or an n-gram method speculated, ``draft_n``
(tokens drafted) and ``draft_n_accepted``. The proxy reads them from the answer it passes on
(the last event of a stream) and adds what only it can know: the request's wall time, and how
many requests overlapped it (the concurrency the user's tools really use). Nothing here touches
the network; engine.serve.proxy fills it.
"""

from __future__ import annotations

import collections
import json
import threading
from dataclasses import asdict, dataclass

ROLLING = 20  # requests in the rolling view (and in the acceptance alert)
# the alert: acceptance over the last ROLLING requests this far below the tune's, with at least this much drafted
ALERT_DROP = 0.15
ALERT_MIN_DRAFTED = 64


@dataclass(frozen=True)
class RequestRecord:
    id: int
    path: str
    status: int
    stream: bool
    started: float  # time.time() when the request arrived
    seconds: float  # until its answer's last byte was passed on
    overlapped: int  # the most requests in flight at once during this one, itself included
    prompt_tokens: int = 0  # the whole prompt, the part llama-server had cached included
    cached_tokens: int = 0
    generated_tokens: int = 0
    tokens_per_s: float = 0.0  # llama-server's own generation speed for this request
    drafted: int = 0
    accepted: int = 0
    error: str = ""  # why the answer was not a success (llama-server's message, a client gone, ...)

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    def line(self) -> str:
        """One line for a terminal."""
        head = f"#{self.id} {self.path} {self.status}"
        if self.error:
            return f"{head} {self.error} ({self.seconds:.1f} s)"
        acc = f"acceptance {self.acceptance:.0%} ({self.accepted}/{self.drafted})" if self.drafted else "no drafts"
        return (
            f"{head} {self.prompt_tokens} prompt ({self.cached_tokens} cached) + {self.generated_tokens} generated, "
            f"{self.tokens_per_s:.1f} tok/s, {acc}, {self.overlapped} in flight, {self.seconds:.1f} s"
        )

    def json(self) -> str:
        return json.dumps({**asdict(self), "acceptance": self.acceptance}, sort_keys=True)


def record_from_answer(answer: dict | None) -> dict:
    """The figures of one answer (a whole response, or a stream's event that holds ``timings``)."""
    t = (answer or {}).get("timings") or {}
    return {
        "prompt_tokens": int(t.get("prompt_n", 0) or 0) + int(t.get("cache_n", 0) or 0),
        "cached_tokens": int(t.get("cache_n", 0) or 0),
        "generated_tokens": int(t.get("predicted_n", 0) or 0),
        "tokens_per_s": float(t.get("predicted_per_second", 0.0) or 0.0),
        "drafted": int(t.get("draft_n", 0) or 0),
        "accepted": int(t.get("draft_n_accepted", 0) or 0),
    }


class SseTimings:
    """Finds the last ``timings`` in a stream of server-sent events, fed in whatever pieces the
    network delivers. Only ``data:`` lines that mention timings are parsed: the others pass by."""

    def __init__(self) -> None:
        self._buf = b""
        self.last: dict | None = None
        self.error: str = ""

    def feed(self, chunk: bytes) -> None:
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            self._line(line.strip())

    def close(self) -> None:
        if self._buf.strip():
            self._line(self._buf.strip())
        self._buf = b""

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:") or (b'"timings"' not in line and b'"error"' not in line):
            return
        try:
            event = json.loads(line[5:].strip())
        except ValueError:
            return
        if isinstance(event, dict) and "timings" in event:
            self.last = event
        elif isinstance(event, dict) and isinstance(event.get("error"), dict):
            self.error = str(event["error"].get("message", ""))


@dataclass(frozen=True)
class Rolling:
    """The last requests together: what the Serve page's header and the alert read."""

    requests: int
    generated_tokens: int
    tokens_per_s: float  # generated tokens over the requests' summed generation time (llama-server's speeds)
    drafted: int
    accepted: int
    max_overlapped: int

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


@dataclass(frozen=True)
class ServerCounters:
    """llama-server's own speculative-decoding counters (its /metrics) since it last started. They add
    what the per-request timings cannot: how far into a draft acceptance reaches, position by position,
    which says whether a longer or a shorter draft would serve this traffic better."""

    drafts: int
    drafted: int
    accepted: int
    accepted_by_position: tuple[int, ...]  # tokens accepted at draft position 1, 2, ...

    @classmethod
    def from_metrics(cls, metrics: dict) -> ServerCounters:
        return cls(
            int(metrics.get("spec_decode_num_drafts_total", 0)),
            int(metrics.get("spec_decode_num_draft_tokens_total", 0)),
            int(metrics.get("spec_decode_num_accepted_tokens_total", 0)),
            tuple(int(n) for n in metrics.get("accepted_by_position", ())),
        )

    def reach(self) -> list[float]:
        """The share of drafts whose token at each position was accepted, position 1 first."""
        return [n / self.drafts for n in self.accepted_by_position] if self.drafts else []

    def line(self) -> str:
        """'' before the first draft."""
        reach = self.reach()
        if not reach:
            return ""
        shown = ", ".join(f"{i}: {share:.0%}" for i, share in enumerate(reach[:8], start=1))
        return f"drafts accepted up to position {shown} (llama-server's /metrics, {self.drafts} drafts)"


class Watch:
    """Every request the proxy passed on, newest last; safe to use from the proxy's thread and the
    GUI's or the CLI's. ``counters``: llama-server's own, as the serving session last read them."""

    # the most requests any reader takes is 200 (the Serve page's table and charts); a history of 1,000 covers
    # that five times over at ~0.7 KB a request, where 10,000 (~6.5 MB) showed as growth in the serve soak
    def __init__(self, keep: int = 1_000):
        self.counters: ServerCounters | None = None
        self._lock = threading.Lock()
        self._records: collections.deque[RequestRecord] = collections.deque(maxlen=keep)
        self._next_id = 1
        self._in_flight = 0
        self._peaks: dict[int, int] = {}  # id -> the most in flight during that request
        self.total = 0

    def begin(self) -> int:
        """A request arrived: its id. Every request in flight sees the new count."""
        with self._lock:
            rid = self._next_id
            self._next_id += 1
            self._in_flight += 1
            self._peaks[rid] = self._in_flight
            for other in self._peaks:
                self._peaks[other] = max(self._peaks[other], self._in_flight)
            return rid

    def end(self, rid: int, **fields) -> RequestRecord:
        with self._lock:
            self._in_flight -= 1
            peak = self._peaks.pop(rid, 1)
            rec = RequestRecord(id=rid, overlapped=peak, **fields)
            self._records.append(rec)
            self.total += 1
            return rec

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def records(self, last: int | None = None) -> list[RequestRecord]:
        with self._lock:
            recs = list(self._records)
        return recs[-last:] if last else recs

    def rolling(self, last: int = ROLLING) -> Rolling:
        recs = [r for r in self.records() if r.status == 200 and not r.error][-last:]
        gen = sum(r.generated_tokens for r in recs)
        gen_s = sum(r.generated_tokens / r.tokens_per_s for r in recs if r.tokens_per_s > 0)
        return Rolling(
            requests=len(recs),
            generated_tokens=gen,
            tokens_per_s=gen / gen_s if gen_s else 0.0,
            drafted=sum(r.drafted for r in recs),
            accepted=sum(r.accepted for r in recs),
            max_overlapped=max((r.overlapped for r in recs), default=0),
        )


def acceptance_alert(rolling: Rolling, tuned_acceptance: float | None) -> str:
    """A line when acceptance on the user's traffic fell well below what the tune measured, else ''."""
    if tuned_acceptance is None or rolling.acceptance is None or rolling.drafted < ALERT_MIN_DRAFTED:
        return ""
    if rolling.acceptance >= tuned_acceptance - ALERT_DROP:
        return ""
    return (
        f"acceptance over the last {rolling.requests} requests is {rolling.acceptance:.0%}, against "
        f"{tuned_acceptance:.0%} when tuned: your traffic is not what the setting was tuned on. "
        "Record it and tune on the recording."
    )
