"""The SQLite history: round trips, WAL, concurrent writers, migrations, CSV, compare, the CLI."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import platformdirs
import pytest

from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.measure.history import (
    SCHEMA_VERSION,
    History,
    HistoryError,
    compare,
    default_path,
    fingerprint,
    migrate,
    record_summary,
)

SETTINGS = {"spec": {"spec_type": "draft-simple", "draft_n_max": 4}, "sampling": {"temp": 0.0}}
RESULTS = {"tokens_per_s": 123.5, "acceptance_rate": 0.75, "drafted": 188, "accepted": 141, "text": "def f():"}


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "history.sqlite3"


def test_record_and_read_back(db_path, pair):
    target, draft = pair
    with History(db_path) as h:
        entry_id = h.record(
            "run",
            settings=SETTINGS,
            results=RESULTS,
            target=target,
            draft=draft,
            hardware_info={"gpu": "none"},
            llama_build="b1-0c1e570",
        )
        e = h.get(entry_id)
    assert (e.kind, e.tokens_per_s, e.acceptance_rate, e.llama_build) == ("run", 123.5, 0.75, "b1-0c1e570")
    assert e.settings == SETTINGS and e.results == RESULTS
    assert e.target == str(target) and e.draft == str(draft)
    assert e.hardware["gpu"] == "none" and e.hardware["cpu_count"] == os.cpu_count() and e.hardware["platform"]
    head = target.read_bytes()[: 1 << 20]
    assert e.models["target"] == {
        "path": str(target),
        "size": target.stat().st_size,
        "mtime": target.stat().st_mtime,
        "sha256_first_mib": hashlib.sha256(head).hexdigest(),
    }
    assert e.models["draft"] == fingerprint(draft)


def test_fingerprint_changes_with_the_content(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(b"GGUF" + b"\0" * 100)
    b.write_bytes(b"GGUF" + b"\1" * 100)
    assert fingerprint(a)["sha256_first_mib"] != fingerprint(b)["sha256_first_mib"]
    assert fingerprint(a)["size"] == fingerprint(b)["size"] == 104


def test_wal_mode_and_the_schema_version(db_path):
    with History(db_path) as h:
        assert h.journal_mode == "wal"
    raw = sqlite3.connect(db_path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    indexes = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"runs_kind_time", "runs_time", "runs_tokens_per_s", "runs_acceptance_rate"} <= indexes
    raw.close()


def test_list_is_newest_first_with_limit_and_kind(db_path):
    with History(db_path) as h:
        ids = [
            h.record(kind, settings={}, results={"tokens_per_s": float(i)}, created_at=1000.0 + i)
            for i, kind in enumerate(["run", "validate", "run", "tune", "run"])
        ]
        assert [e.id for e in h.entries()] == ids[::-1]
        assert [e.id for e in h.entries(limit=2)] == [ids[4], ids[3]]
        assert [e.id for e in h.entries(kind="run")] == [ids[4], ids[2], ids[0]]
        assert h.entries(kind="validate")[0].tokens_per_s == 1.0
        with pytest.raises(HistoryError, match="unknown kind"):
            h.record("bench", settings={}, results={})
        with pytest.raises(HistoryError, match="no history entry 999"):
            h.get(999)


def test_two_threads_write_through_one_history(db_path):
    per_thread = 250
    with History(db_path) as h:
        errors: list[BaseException] = []

        def write(name: str) -> None:
            try:
                for i in range(per_thread):
                    h.record("run", settings={"writer": name, "i": i}, results={"tokens_per_s": i})
                    h.entries(limit=3)  # reads interleaved with the other thread's writes
            except BaseException as exc:  # surfaced in the main thread
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(n,), name=f"writer-{n}") for n in ("a", "b")]
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # switch threads as often as possible, to interleave the two writers
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            sys.setswitchinterval(interval)
        assert errors == []
        rows = h.entries(limit=None)
    assert len(rows) == 2 * per_thread and len({r.id for r in rows}) == 2 * per_thread
    for name in ("a", "b"):
        assert sorted(r.settings["i"] for r in rows if r.settings["writer"] == name) == list(range(per_thread))


def test_two_connections_write_at_once(db_path):
    """Two History objects are two connections, as the GUI and a CLI would be: WAL and the busy timeout."""
    per_writer = 40
    History(db_path).close()
    errors: list[BaseException] = []

    def write(name: str) -> None:
        try:
            with History(db_path) as h:
                for i in range(per_writer):
                    h.record("validate", settings={"writer": name}, results={"tokens_per_s": i})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,), name=f"conn-{n}") for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with History(db_path) as h:
        assert h.count() == 2 * per_writer


def test_migration_from_an_empty_file(db_path):
    db_path.write_bytes(b"")
    with History(db_path) as h:
        assert h.count() == 0
    raw = sqlite3.connect(db_path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    raw.close()


def test_migration_from_the_first_schema_keeps_the_rows(db_path):
    old = sqlite3.connect(db_path, isolation_level=None)
    assert migrate(old, to_version=1) == 0
    old.execute(
        "INSERT INTO runs (kind, created_at, tokens_per_s, acceptance_rate, target, draft, settings, "
        "hardware, models, results) VALUES ('run', 5.0, 42.0, 0.5, 't.gguf', NULL, '{}', '{}', '{}', "
        "'{\"tokens_per_s\": 42.0}')"
    )
    columns = [r[1] for r in old.execute("PRAGMA table_info(runs)")]
    assert "llama_build" not in columns
    old.close()
    with History(db_path) as h:
        (e,) = h.entries()
        assert (e.kind, e.tokens_per_s, e.target, e.llama_build, e.results) == (
            "run",
            42.0,
            "t.gguf",
            None,
            {"tokens_per_s": 42.0},
        )
        h.record("run", settings={}, results={}, llama_build="b2")
        assert h.entries()[0].llama_build == "b2"


def test_a_newer_schema_is_refused(db_path):
    raw = sqlite3.connect(db_path)
    raw.execute("PRAGMA user_version = 99")
    raw.close()
    with pytest.raises(HistoryError, match="schema version 99, newer"):
        History(db_path)


def test_csv_export(db_path, tmp_path):
    with History(db_path) as h:
        h.record("run", settings=SETTINGS, results=RESULTS, created_at=10.0)
        h.record("validate", settings=SETTINGS, results={"tokens_per_s": 99.0}, created_at=20.0)
        assert h.export_csv(tmp_path / "all.csv") == 2
        assert h.export_csv(tmp_path / "runs.csv", kind="run") == 1
    with open(tmp_path / "all.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["kind"] for r in rows] == ["run", "validate"]  # oldest first
    assert float(rows[0]["tokens_per_s"]) == 123.5 and rows[1]["acceptance_rate"] == ""
    assert json.loads(rows[0]["results"]) == RESULTS and json.loads(rows[0]["settings"]) == SETTINGS


def test_compare_puts_every_field_side_by_side(db_path):
    with History(db_path) as h:
        a = h.get(h.record("run", settings=SETTINGS, results=RESULTS))
        b = h.get(
            h.record(
                "run",
                settings={**SETTINGS, "spec": {"spec_type": "ngram-mod", "draft_n_max": 4}},
                results={**RESULTS, "tokens_per_s": 150.0, "steps": 9},
            )
        )
    rows = {name: (x, y) for name, x, y in compare(a, b)}
    assert rows["settings.spec.spec_type"] == ("draft-simple", "ngram-mod")
    assert rows["settings.spec.draft_n_max"] == (4, 4)
    assert rows["results.tokens_per_s"] == (123.5, 150.0)
    assert rows["results.steps"] == (None, 9)


def test_record_summary_stores_the_settings_dataclasses(pair, tmp_path):
    target, draft = pair
    load = LoadSettings(target, draft, ctx=1024)
    entry_id = record_summary(
        "run",
        load,
        SpecSettings("draft-simple", draft_n_max=5),
        SamplingSettings(),
        RESULTS,
        path=tmp_path / "h.sqlite3",
    )
    with History(tmp_path / "h.sqlite3") as h:
        e = h.get(entry_id)
    assert e.settings["load"]["ctx"] == 1024 and e.settings["load"]["target"] == str(target)
    assert e.settings["spec"]["draft_n_max"] == 5 and e.acceptance_rate == 0.75


def test_the_data_folder_is_platformdirs_unless_overridden(monkeypatch, tmp_path):
    monkeypatch.delenv("SPECTUNE_DATA_DIR", raising=False)
    assert default_path().parent == Path(platformdirs.user_data_dir("spectune", appauthor=False))
    monkeypatch.setenv("SPECTUNE_DATA_DIR", str(tmp_path / "data"))
    assert default_path() == tmp_path / "data" / "history.sqlite3"


CLI = (
    "import argparse, sys\n"
    "from engine.cli.deploy import register\n"
    "p = argparse.ArgumentParser(prog='spectune')\n"
    "register(p.add_subparsers(dest='command'))\n"
    "a = p.parse_args(sys.argv[1:])\n"
    "sys.exit(a.func(a))\n"
)


def run_cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPECTUNE_DATA_DIR=str(data_dir))
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
        env=env,
    )


def test_history_commands(tmp_path):
    with History(tmp_path / "history.sqlite3") as h:
        first = h.record("run", settings=SETTINGS, results=RESULTS, target="/m/target.gguf", created_at=100.0)
        second = h.record(
            "validate",
            settings={**SETTINGS, "spec": {"spec_type": "ngram-mod"}},
            results={**RESULTS, "tokens_per_s": 150.0},
            target="/m/target.gguf",
            created_at=200.0,
        )
    listed = run_cli(tmp_path, "history")
    lines = listed.stdout.strip().splitlines()
    assert listed.returncode == 0 and len(lines) == 3
    assert lines[1].split()[0] == str(second) and "validate" in lines[1] and "target.gguf" in lines[1]
    assert run_cli(tmp_path, "history", "--kind", "run", "--limit", "1", "--json").stdout.count('"id"') == 1

    shown = run_cli(tmp_path, "history", "show", str(first))
    assert 'settings.spec.spec_type: "draft-simple"' in shown.stdout and "results.tokens_per_s: 123.5" in shown.stdout

    compared = run_cli(tmp_path, "history", "compare", str(first), str(second))
    assert compared.returncode == 0
    differing = {line.split()[0] for line in compared.stdout.splitlines()[1:-1]}
    assert {"kind", "settings.spec.spec_type", "results.tokens_per_s"} <= differing
    assert "results.accepted" not in differing
    assert "results.accepted" in run_cli(tmp_path, "history", "compare", str(first), str(second), "--all").stdout

    out_csv = tmp_path / "out.csv"
    exported = run_cli(tmp_path, "history", "export", "--csv", str(out_csv))
    assert exported.stdout.strip() == f"wrote 2 entries to {out_csv}"
    assert len(list(csv.reader(out_csv.open(encoding="utf-8")))) == 3

    missing = run_cli(tmp_path, "history", "show", "77")
    assert missing.returncode == 2 and missing.stderr.strip() == "spectune: error: no history entry 77"
