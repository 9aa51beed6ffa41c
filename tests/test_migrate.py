"""`cuemem migrate`: the raw turn log from one store to another (SQLite <-> PostgreSQL) through the export format,
verified by counts and log checksums; rerun after an interruption without doubles; conflicts refused."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import PG
from typer.testing import CliRunner

import cuemem.memory
from cuemem import Memory
from cuemem.cli import app
from cuemem.embed import HashingEmbedder
from cuemem.errors import CuememError
from cuemem.migrate import MigrationError, MigrationMismatch, log_checksums, migrate

NAMESPACES = [
    {"user_id": "alice"},
    {"user_id": "alice", "agent_id": "planner"},
    {"user_id": "alice", "agent_id": "planner", "run_id": "r-1"},
    {"user_id": "bøb 🐙", "run_id": "nightly"},
]
BIG = 600  # turns in alice's namespace: several import batches (INGEST_BATCH = 256)


@pytest.fixture
def pg() -> Iterator[Callable[[str], str]]:
    """DSNs of fresh PostgreSQL databases, dropped after the test."""
    PG.start(Path(tempfile.gettempdir()) / f"cuemem-pg-{os.getpid()}")
    count = iter(range(1000))

    def dsn(label: str) -> str:
        return PG.dsn(f"mig_{os.getpid()}_{label}_{next(count)}")

    yield dsn
    PG.drop_created()


def open_mem(target: str | Path, **kwargs: Any) -> Memory:
    return Memory(target, engine="bm25", embedder=HashingEmbedder(), llm_cache="off", **kwargs)


def turns_for(index: int, namespace: dict[str, str]) -> list[dict[str, Any]]:
    """Turns with awkward content: unicode, NUL and PostgreSQL's escape character in text and metadata, nested
    metadata with numbers, timestamps in several spellings (and none)."""
    n = BIG if index == 0 else 7
    out = []
    for i in range(n):
        out.append(
            {
                "id": f"t{index}-{i}",
                "text": f"turn {i} of {namespace['user_id']}: café ☕ Ωμέγα עברית \x00 nul \ue000 esc \u2028 line {i}",
                "speaker": ["Maya", "Théo", "助手"][i % 3],
                "session_id": f"s{i // 50}",
                "timestamp": [None, "2023-05-08T13:56:00Z", "1:56 pm on 8 May, 2023", "someday"][i % 4],
                "metadata": {"i": i, "z": 0.1, "a": [1, "two", {"deep": "\x00\ue000é"}], "emoji": "🐙"}
                if i % 2
                else {},
            }
        )
    return out


def seed(target: str | Path) -> dict[str, list[dict[str, Any]]]:
    """A store with the NAMESPACES' turns (added through the API, indexed by bm25); returns what was added."""
    added = {}
    with open_mem(target) as memory:
        for index, namespace in enumerate(NAMESPACES):
            turns = turns_for(index, namespace)
            for start in range(0, len(turns), 200):
                memory.add(turns[start : start + 200], **namespace)
            added[json.dumps(namespace, sort_keys=True)] = turns
    return added


def dump(target: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Every namespace's turns in log order, as exported (namespace -> parsed lines)."""
    out = io.StringIO()
    with open_mem(target, read_only=True) as memory:
        memory.export(out)
    logs: dict[str, list[dict[str, Any]]] = {}
    for line in out.getvalue().split("\n"):
        if line:
            data = json.loads(line)
            key = json.dumps({k: v for k, v in data.pop("namespace").items() if v is not None}, sort_keys=True)
            logs.setdefault(key, []).append(data)
    return logs


def sha_of(logs: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """An independent checksum of each namespace's log (not the library's): the parsed lines, in order."""
    return {ns: hashlib.sha256(json.dumps(turns, sort_keys=True).encode()).hexdigest() for ns, turns in logs.items()}


@contextmanager
def no_models(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any embedder or model client the migration would create raises."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the migration loaded a model")

    monkeypatch.setattr(cuemem.memory, "make_embedder", refuse)
    monkeypatch.setattr(cuemem.memory, "make_client", refuse)
    yield
    monkeypatch.undo()


def test_round_trip_sqlite_postgres_sqlite(tmp_path, pg, monkeypatch):
    source, back = tmp_path / "memory.db", tmp_path / "back.db"
    added = seed(source)
    dsn = pg("trip")
    bars: dict[str, list[int]] = {}

    @contextmanager
    def recording(label: str, total: int) -> Iterator[Callable[[int], None]]:
        bars[label] = [total]
        yield bars[label].append

    with no_models(monkeypatch):
        there = migrate(source, dsn, progress=recording)
        home = migrate(dsn, back)
    total = sum(len(t) for t in added.values())
    assert there.turns == there.copied == home.copied == total == BIG + 21 and there.skipped == home.skipped == 0
    assert len(there.namespaces) == len(home.namespaces) == 4
    # progress: the copy in batches (at most 256 turns, one namespace each), then the read-back
    assert bars["migrate"] == [total, 256, 256, 88, 7, 7, 7] and bars["verify"][0] == total == sum(bars["verify"][1:])
    assert there.target.startswith("postgresql://") and there.source == str(source)
    # every turn, exactly: ids, text (unicode, NUL, U+E000, U+2028), speaker, session, timestamp, metadata, order
    logs = dump(source)
    for key, turns in added.items():
        assert logs[key] == turns
    assert dump(dsn) == logs and dump(back) == logs
    assert sha_of(dump(dsn)) == sha_of(logs)
    # the reported checksums: equal both ways, and what log_checksums reads from each store
    assert [(n.namespace, n.turns, n.checksum) for n in there.namespaces] == [
        (n.namespace, n.turns, n.checksum) for n in home.namespaces
    ]
    for target in (source, dsn, back):
        with open_mem(target, read_only=True) as memory:
            sums = log_checksums(memory)
        assert {k: (d.count, d.sha.hexdigest()) for k, d in sums.items()} == {
            (n.namespace.user_id, n.namespace.agent_id, n.namespace.run_id): (n.turns, n.checksum)
            for n in there.namespaces
        }
    # derived state is not copied: bm25 has indexed nothing in the target, and rebuilds from the log on first use
    with open_mem(dsn) as memory:
        assert memory.pending(user_id="alice", engine="bm25") == BIG
        hits = memory.search("Ωμέγα turn 599", user_id="alice", k=3)
        assert hits.turn_ids[0] == "t0-599" and memory.pending(user_id="alice", engine="bm25") == 0
        assert memory.derived_state(user_id="bøb 🐙", run_id="nightly")["items"] == {}


def interrupting(after: int) -> Callable[[str, int], Any]:
    """A progress factory whose advance raises once `after` turns are done (a crash in the middle)."""

    @contextmanager
    def factory(label: str, total: int) -> Iterator[Callable[[int], None]]:
        done = 0

        def advance(n: int) -> None:
            nonlocal done
            done += n
            if done >= after:
                raise KeyboardInterrupt

        yield advance

    return factory


@pytest.mark.parametrize("direction", ["to_postgres", "to_sqlite"])
def test_interrupted_then_rerun_doubles_nothing(tmp_path, pg, direction):
    seeded = tmp_path / "memory.db"
    seed(seeded)
    if direction == "to_postgres":
        source, target = seeded, pg("partial")
    else:
        source, target = pg("source"), tmp_path / "target.db"
        migrate(seeded, source)
    with pytest.raises(KeyboardInterrupt):
        migrate(source, target, progress=interrupting(300))
    partial = {k: len(v) for k, v in dump(target).items()}
    assert sum(partial.values()) == 512  # two batches of alice's log got in, the third did not
    report = migrate(source, target)
    assert report.skipped == 512 and report.copied == BIG + 21 - 512
    first = report.namespaces[0]
    assert (first.namespace.user_id, first.namespace.agent_id, first.skipped, first.copied) == ("alice", None, 512, 88)
    logs = dump(target)
    assert logs == dump(source) and sum(len(v) for v in logs.values()) == BIG + 21
    ids = [t["id"] for turns in logs.values() for t in turns]
    assert len(ids) == len(set(ids))
    # and a third run copies nothing
    again = migrate(source, target)
    assert (
        again.copied == 0
        and again.skipped == BIG + 21
        and [n.checksum for n in again.namespaces] == [n.checksum for n in report.namespaces]
    )


def test_partial_precopy_through_import_is_completed(tmp_path, pg):
    source = tmp_path / "memory.db"
    seed(source)
    out = io.StringIO()
    with open_mem(source, read_only=True) as memory:
        memory.export(out, user_id="alice", agent_id="planner")
    lines = out.getvalue().split("\n")[:3]  # not splitlines: the text holds U+2028
    dsn = pg("pre")
    with open_mem(dsn) as memory:
        assert memory.import_(lines).added == 3
    report = migrate(source, dsn)
    assert report.skipped == 3 and report.copied == BIG + 18
    assert dump(dsn) == dump(source)


def test_conflicting_target_is_a_mismatch_and_left_as_is(tmp_path, pg):
    source = tmp_path / "memory.db"
    seed(source)
    dsn = pg("conflict")
    with open_mem(dsn) as memory:
        memory.add({"id": "t1-3", "text": "something else entirely"}, user_id="alice", agent_id="planner")
    with pytest.raises(MigrationMismatch, match=r"already holds turn 't1-3' of \(user=alice,agent=planner\)"):
        migrate(source, dsn)
    with open_mem(dsn, read_only=True) as memory:
        assert memory.get("t1-3", user_id="alice", agent_id="planner").text == "something else entirely"
        assert [t["id"] for t in dump(dsn)[json.dumps(NAMESPACES[1], sort_keys=True)]] == ["t1-3"]
    # a target holding a turn the source does not: the counts differ after the copy
    other = tmp_path / "extra.db"
    with open_mem(other) as memory:
        memory.add({"id": "extra", "text": "only in the target"}, user_id="alice", run_id="x")
        memory.add({"id": "extra", "text": "only in the target"}, user_id="alice")
    with pytest.raises(MigrationMismatch, match=r"\(user=alice\) holds 601 turns in .*extra.db but 600 in"):
        migrate(source, other)
    # same turns in another order: the checksum differs
    shuffled = pg("order")
    out = io.StringIO()
    with open_mem(source, read_only=True) as memory:
        memory.export(out, user_id="alice", agent_id="planner", run_id="r-1")
    with open_mem(shuffled) as memory:
        assert memory.import_(out.getvalue().split("\n")[-2::-1]).added == 7
    with pytest.raises(MigrationMismatch, match=r"checksum of \(user=alice,agent=planner,run=r-1\) differs"):
        migrate(source, shuffled)


def test_source_and_target_must_differ(tmp_path, pg):
    source = tmp_path / "memory.db"
    seed(source)
    (tmp_path / "link.db").symlink_to(source)
    for target in (source, tmp_path / "link.db", tmp_path / "." / "memory.db"):
        with pytest.raises(MigrationError, match="the same store"):
            migrate(source, target)
    dsn = pg("same")
    migrate(source, dsn)
    with pytest.raises(MigrationError, match="the same store"):
        migrate(dsn, dsn.replace("postgres:@", "someone:pw@"))
    copy = tmp_path / "copy.db"
    copy.write_bytes(source.read_bytes())
    with pytest.raises(MigrationError, match="file copy"):
        migrate(source, copy)
    with pytest.raises(CuememError, match="no store at"):
        migrate(tmp_path / "missing.db", tmp_path / "new.db")
    assert not (tmp_path / "new.db").exists()


runner = CliRunner()


def test_cli_migrate_end_to_end(tmp_path, pg):
    source = tmp_path / "memory.db"
    seed(source)
    dsn = pg("cli").replace("postgres:@", "postgres:hunter2@")  # the server trusts the socket: any password
    r = runner.invoke(app, ["migrate", "--from", str(source), "--to", dsn])
    assert r.exit_code == 0, r.output
    assert "hunter2" not in r.output
    assert f"user=alice: {BIG} turns, {BIG} copied, 0 already there, sha256 " in r.output
    assert "user=bøb 🐙,run=nightly: 7 turns, 7 copied" in r.output
    assert f"migrated 4 namespaces, {BIG + 21} turns ({BIG + 21} copied, 0 already there)" in r.output
    assert "counts and log checksums verified" in r.output
    assert dump(dsn) == dump(source)
    r = runner.invoke(app, ["migrate", "--from", str(source), "--to", dsn, "--json"])
    data = json.loads(r.output)
    assert r.exit_code == 0 and data["copied"] == 0 and data["skipped"] == BIG + 21 and data["verified"] is True
    assert "hunter2" not in r.output and len(data["namespaces"]) == 4
    # back to SQLite through the CLI, then a conflict: exit 1 with one clear line
    back = tmp_path / "back.db"
    assert runner.invoke(app, ["migrate", "--from", dsn, "--to", str(back)]).exit_code == 0
    assert dump(back) == dump(source)
    clash = tmp_path / "clash.db"
    with open_mem(clash) as memory:
        memory.add({**turns_for(0, NAMESPACES[0])[5], "text": "not the same"}, user_id="alice")  # only the text
    r = runner.invoke(app, ["migrate", "--from", dsn, "--to", str(clash)])
    assert r.exit_code == 1 and "Traceback" not in r.output
    said = " ".join(r.output.split())  # one message (the runner's terminal is 80 columns: rich wraps it)
    assert said.startswith("Error: ") and said.count("Error") == 1
    assert "already holds turn 't0-5' of (user=alice) with other content (differing in text), left as is" in said
    assert "hunter2" not in r.output
    r = runner.invoke(app, ["migrate", "--from", str(source), "--to", str(source)])
    assert r.exit_code == 1 and "the same store" in r.output
