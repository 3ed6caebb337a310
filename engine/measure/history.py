"""Every run, validation and tune, kept in SQLite across sessions.

One table, ``runs``: the scalar columns that lists and charts filter and sort
on (kind, time, tokens/s, acceptance rate) are indexed; settings, hardware,
model fingerprints and results are JSON text beside them. The file lives in the
platform's data folder (platformdirs), or in $SPECTUNE_DATA_DIR.

The database runs in WAL mode, so readers never block the writer and two
processes (the GUI and a CLI) can use it at once; ``busy_timeout`` waits out
the other writer instead of failing. One ``History`` object shares one
connection between threads behind a lock (the GUI's worker threads and its
main thread).

The schema version is SQLite's ``user_version``: ``migrate`` applies every
step above it in order, each in one transaction.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import os
import platform
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.core.paths import data_dir

DB_NAME = "history.sqlite3"
BUSY_TIMEOUT_MS = 10_000
FINGERPRINT_BYTES = 1 << 20
KINDS = ("run", "lab", "validate", "tune")  # lab: a generation run from the desktop app


class HistoryError(RuntimeError):
    """The history cannot be read or written; the message says why."""


def default_path() -> Path:
    return data_dir() / DB_NAME


# -- schema ---------------------------------------------------------------------------------


def _v1_runs(db: sqlite3.Connection) -> None:
    db.execute("""CREATE TABLE runs (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        kind            TEXT NOT NULL,
        created_at      REAL NOT NULL,          -- Unix time, seconds
        tokens_per_s    REAL,
        acceptance_rate REAL,
        target          TEXT,
        draft           TEXT,
        settings        TEXT NOT NULL,          -- JSON: load, spec, sampling
        hardware        TEXT NOT NULL,          -- JSON
        models          TEXT NOT NULL,          -- JSON: fingerprint per role
        results         TEXT NOT NULL           -- JSON: the summary
    )""")
    db.execute("CREATE INDEX runs_kind_time ON runs (kind, created_at)")
    db.execute("CREATE INDEX runs_time ON runs (created_at)")


def _v2_build_and_rate_indexes(db: sqlite3.Connection) -> None:
    # which llama.cpp produced the numbers, and the two speed columns charts sort on
    db.execute("ALTER TABLE runs ADD COLUMN llama_build TEXT")
    db.execute("CREATE INDEX runs_tokens_per_s ON runs (tokens_per_s)")
    db.execute("CREATE INDEX runs_acceptance_rate ON runs (acceptance_rate)")


MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_v1_runs, _v2_build_and_rate_indexes)
SCHEMA_VERSION = len(MIGRATIONS)


@contextmanager
def _write_transaction(db: sqlite3.Connection):
    """BEGIN IMMEDIATE: take the write lock up front, so a busy database is waited for, not failed."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _user_version(db: sqlite3.Connection) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


def migrate(db: sqlite3.Connection, to_version: int = SCHEMA_VERSION) -> int:
    """Bring the schema up to ``to_version``; returns the version found before.

    ``db`` must be in autocommit mode (isolation_level=None): each step runs in its
    own transaction, so a failed step leaves the previous version intact.
    """
    found = _user_version(db)
    if found > SCHEMA_VERSION:
        raise HistoryError(
            f"the history database has schema version {found}, newer than this SpecTune "
            f"knows ({SCHEMA_VERSION}); update SpecTune or use another SPECTUNE_DATA_DIR"
        )
    for version in range(found + 1, to_version + 1):
        with _write_transaction(db):
            if _user_version(db) >= version:
                continue  # another process migrated while we waited for the lock
            MIGRATIONS[version - 1](db)
            db.execute(f"PRAGMA user_version = {version}")
    return found


# -- what a row holds ---------------------------------------------------------------------------


def fingerprint(path: str | Path) -> dict:
    """A model file's identity: sha256 of its first MiB, its size and mtime.

    Not a hash of the whole file (GGUFs are gigabytes): the first MiB holds the
    header, the metadata and the tensor index, so together with size and mtime it
    tells apart any two models a user would confuse, at a millisecond's cost.
    """
    p = Path(path)
    st = p.stat()
    return {
        "path": str(p),
        "size": st.st_size,
        "mtime": st.st_mtime,
        "sha256_first_mib": _head_sha256(str(p), st.st_size, st.st_mtime_ns, st.st_ino),
    }


@functools.lru_cache(maxsize=64)
def _head_sha256(path: str, size: int, mtime_ns: int, inode: int) -> str:
    """Keyed by size, mtime and inode too: the Lab records a run every second or so, each with the
    same two files, and a rewritten or replaced file gets a new key."""
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read(FINGERPRINT_BYTES)).hexdigest()


def hardware(extra: dict | None = None) -> dict:
    info = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
    info.update(extra or {})
    return info


@dataclass(frozen=True)
class Entry:
    id: int
    kind: str
    created_at: float
    tokens_per_s: float | None
    acceptance_rate: float | None
    target: str | None
    draft: str | None
    llama_build: str | None
    settings: dict
    hardware: dict
    models: dict
    results: dict

    def to_dict(self) -> dict:
        return dict(vars(self))


_COLUMNS = (
    "id, kind, created_at, tokens_per_s, acceptance_rate, target, draft, llama_build, "
    "settings, hardware, models, results"
)


def _entry(row: tuple) -> Entry:
    *scalars, settings, hw, models, results = row
    return Entry(*scalars, json.loads(settings), json.loads(hw), json.loads(models), json.loads(results))  # type: ignore[call-arg]


def _number_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class History:
    """The history database; ``with History() as h: h.record(...)``."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else default_path()
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # autocommit: every write below runs in an explicit BEGIN IMMEDIATE transaction
            self._db = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False, isolation_level=None
            )
        except (OSError, sqlite3.Error) as exc:
            raise HistoryError(f"cannot open the history at {self.path}: {exc}") from exc
        try:
            self.journal_mode = self._db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if self.journal_mode == "wal":
                # the Lab records a run every second or so from the GUI thread: no fsync per commit. A
                # crash of the app loses nothing committed; a power cut may lose the last few runs.
                self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            migrate(self._db)
        except sqlite3.Error as exc:
            self._db.close()
            raise HistoryError(f"cannot open the history at {self.path}: {exc}") from exc
        except HistoryError:
            self._db.close()
            raise

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def record(
        self,
        kind: str,
        *,
        settings: dict,
        results: dict,
        target: str | Path | None = None,
        draft: str | Path | None = None,
        hardware_info: dict | None = None,
        llama_build: str | None = None,
        created_at: float | None = None,
    ) -> int:
        """Store one measurement; returns its id. tokens/s and acceptance come from ``results``."""
        if kind not in KINDS:
            raise HistoryError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
        models = {
            role: fingerprint(p)
            for role, p in (("target", target), ("draft", draft))
            if p is not None and Path(p).is_file()
        }
        row = (
            kind,
            time.time() if created_at is None else created_at,
            _number_or_none(results.get("tokens_per_s")),
            _number_or_none(results.get("acceptance_rate")),
            None if target is None else str(target),
            None if draft is None else str(draft),
            llama_build,
            json.dumps(settings),
            json.dumps(hardware(hardware_info)),
            json.dumps(models),
            json.dumps(results),
        )
        with self._lock:
            try:
                with _write_transaction(self._db):
                    cur = self._db.execute(
                        "INSERT INTO runs (kind, created_at, tokens_per_s, acceptance_rate, target, draft, "
                        "llama_build, settings, hardware, models, results) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                        row,
                    )
                assert cur.lastrowid is not None  # an INSERT always sets it
                return cur.lastrowid
            except sqlite3.Error as exc:
                raise HistoryError(f"cannot write to the history at {self.path}: {exc}") from exc

    def update(self, entry_id: int, *, settings: dict, results: dict) -> None:
        """Rewrite one entry's settings and results (a Lab run that grows by a generation at a time: one row
        per run, written as each generation ends, so a crash loses at most the generation under way)."""
        with self._lock:
            try:
                with _write_transaction(self._db):
                    cur = self._db.execute(
                        "UPDATE runs SET tokens_per_s = ?, acceptance_rate = ?, settings = ?, results = ? WHERE id = ?",
                        (
                            _number_or_none(results.get("tokens_per_s")),
                            _number_or_none(results.get("acceptance_rate")),
                            json.dumps(settings),
                            json.dumps(results),
                            entry_id,
                        ),
                    )
            except sqlite3.Error as exc:
                raise HistoryError(f"cannot write to the history at {self.path}: {exc}") from exc
        if cur.rowcount != 1:
            raise HistoryError(f"no history entry {entry_id}")

    def _query(self, sql: str, args: Iterable = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._db.execute(sql, tuple(args)).fetchall()
            except sqlite3.Error as exc:
                raise HistoryError(f"cannot read the history at {self.path}: {exc}") from exc

    def entries(self, *, limit: int | None = 20, kind: str | None = None) -> list[Entry]:
        """Newest first."""
        sql, args = f"SELECT {_COLUMNS} FROM runs", list[object]()
        if kind is not None:
            sql += " WHERE kind = ?"
            args.append(kind)
        sql += " ORDER BY created_at DESC, id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return [_entry(r) for r in self._query(sql, args)]

    def get(self, entry_id: int) -> Entry:
        rows = self._query(f"SELECT {_COLUMNS} FROM runs WHERE id = ?", (entry_id,))
        if not rows:
            raise HistoryError(f"no history entry {entry_id}")
        return _entry(rows[0])

    def count(self) -> int:
        return self._query("SELECT COUNT(*) FROM runs")[0][0]

    def export_csv(self, path: str | Path, *, kind: str | None = None) -> int:
        """Every entry (oldest first) as CSV: scalar columns plus the JSON ones as text; returns the row count."""
        rows = list(reversed(self.entries(limit=None, kind=kind)))
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(
                [
                    "id",
                    "kind",
                    "created_at",
                    "tokens_per_s",
                    "acceptance_rate",
                    "target",
                    "draft",
                    "llama_build",
                    "settings",
                    "hardware",
                    "models",
                    "results",
                ]
            )
            for e in rows:
                writer.writerow(
                    [
                        e.id,
                        e.kind,
                        e.created_at,
                        e.tokens_per_s,
                        e.acceptance_rate,
                        e.target,
                        e.draft,
                        e.llama_build,
                        json.dumps(e.settings),
                        json.dumps(e.hardware),
                        json.dumps(e.models),
                        json.dumps(e.results),
                    ]
                )
        return len(rows)


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists of scalars stay whole."""
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        out.update(flatten(value, name) if isinstance(value, dict) else {name: value})
    return out


def compare(a: Entry, b: Entry) -> list[tuple[str, Any, Any]]:
    """(field, value in a, value in b) for every field, the differing ones marked by inequality."""
    left = flatten(
        {
            "kind": a.kind,
            "created_at": a.created_at,
            "llama_build": a.llama_build,
            "settings": a.settings,
            "models": a.models,
            "hardware": a.hardware,
            "results": a.results,
        }
    )
    right = flatten(
        {
            "kind": b.kind,
            "created_at": b.created_at,
            "llama_build": b.llama_build,
            "settings": b.settings,
            "models": b.models,
            "hardware": b.hardware,
            "results": b.results,
        }
    )
    keys = list(dict.fromkeys(list(left) + list(right)))
    return [(k, left.get(k), right.get(k)) for k in keys]


def record_summary(
    kind: str,
    load: Any,
    spec: Any,
    sampling: Any,
    summary: dict,
    *,
    hardware_info: dict | None = None,
    llama_build: str | None = None,
    path: str | Path | None = None,
    entry_id: int | None = None,
) -> int:
    """Store a run / validation summary with its settings (engine.core.settings dataclasses); with entry_id,
    rewrite that entry instead (its run grew) and return the same id."""
    from engine.core.settings import to_dict

    settings = {"load": to_dict(load), "spec": to_dict(spec), "sampling": to_dict(sampling)}
    with History(path) as h:
        if entry_id is not None:
            h.update(entry_id, settings=settings, results=summary)
            return entry_id
        return h.record(
            kind,
            settings=settings,
            results=summary,
            target=load.target,
            draft=load.draft,
            hardware_info=hardware_info,
            llama_build=llama_build,
        )
