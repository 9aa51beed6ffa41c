"""The store contract (issue 10, defect 4 and "Forgetting everywhere"): opening a store to read never writes and never
waits for a writer; a file of another application or of a newer cuemem is refused untouched; an old store is migrated
and keeps every turn; deleted text leaves the file (secure_delete); history keeps no guessable content hash.

Every test runs on SQLite and on PostgreSQL, except those about SQLite files as such (marked sqlite_only, with why);
where such a promise has a PostgreSQL meaning, a PostgreSQL test beside it checks that meaning (`*_on_postgres`,
marked postgres_only)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    ENGINES,
    TRIP,
    checkpoint,
    files_containing,
    on_postgres,
    open_memory,
    store_roots,
    store_target,
)

from cuemem import Memory
from cuemem.store import open_store
from cuemem.store.base import text_hash
from cuemem.store.sqlite import SQLiteStore, StoreError

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0  # root ignores file modes: chmod cannot make a file read-only


def make_store(path: Path, engine: str = "hybrid") -> None:
    """A small, fully indexed store, closed (its WAL folded back into the main file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_memory(path, engine) as memory:
        memory.add(TRIP, user_id="alice", session_id="s1", timestamp="3 March 2024")
        memory.add({"id": "b1", "text": "Bob keeps his bike in the hall."}, user_id="bob", agent_id="a1")
        memory.search("hotel", user_id="alice")
        memory.search("bike", user_id="bob", agent_id="a1")


def tables(path: Path) -> list[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'"))
    finally:
        con.close()


def snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def files_with(memory: Memory, root: Path, needle: str) -> dict[str, str]:
    """Every file of the store (`root`, and on PostgreSQL the database's folder) whose bytes hold `needle`."""
    found: dict[str, str] = {}
    for folder in store_roots(root, memory):
        found.update({str(folder / name): around for name, around in files_containing(folder, needle).items()})
    return found


def pg_fingerprint(dsn: str) -> dict[str, Any]:
    """What a database holds, outside PostgreSQL's catalogs: extensions, relations, and every table's rows."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        extensions = sorted(r[0] for r in conn.execute("SELECT extname FROM pg_extension"))
        relations = sorted(
            conn.execute(
                "SELECT n.nspname, c.relname, c.relkind::text FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'"
            ).fetchall()
        )
        rows = {
            f"{schema}.{name}": conn.execute(
                f'SELECT md5(COALESCE(string_agg(t::text, chr(10) ORDER BY t::text), \'\')) FROM "{schema}"."{name}" t'
            ).fetchone()[0]
            for schema, name, kind in relations
            if kind == "r"
        }
    return {"extensions": extensions, "relations": relations, "rows": rows}


def pg_execute(dsn: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


READ_ONLY_WRITES: list[Callable[[Memory], object]] = [
    lambda memory: memory.add({"id": "new", "text": "a new turn"}, user_id="alice"),
    lambda memory: memory.add({"id": "new", "text": "a new turn"}, user_id="carol"),
    lambda memory: memory.delete("d1", user_id="alice"),
    lambda memory: memory.delete_session("s1", user_id="alice"),
    lambda memory: memory.delete_all(user_id="bob"),
    lambda memory: memory.reindex(user_id="alice"),
]


@pytest.mark.sqlite_only("a SQLite file made read-only with chmod; PostgreSQL: the test below (a SELECT-only role)")
@pytest.mark.parametrize("engine", ENGINES)
def test_reading_a_read_only_store_never_writes(tmp_path: Path, engine: str):
    """Memory(path, read_only=True): search, export, namespaces, turns, history work on a file that may not be written
    (made read-only with chmod, or, as root, watched byte for byte), and every write raises StoreError."""
    db = tmp_path / "store" / "mem.db"
    make_store(db, engine)
    before = snapshot(db)
    modes = {p: p.stat().st_mode for p in (db, db.parent)}
    if not AS_ROOT:
        db.chmod(stat.S_IRUSR | stat.S_IRGRP)
        db.parent.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with open_memory(db, engine, read_only=True, llm_cache=str(tmp_path / "llm-calls.db")) as memory:
            assert "d3" in memory.search("allergic to shellfish", user_id="alice", k=4).turn_ids
            memory.answer("Who is allergic to shellfish?", user_id="alice")
            assert memory.export(io.StringIO()) == 5
            assert {ns.user_id for ns, _ in memory.namespaces()} == {"alice", "bob"}
            assert len(memory.turns(user_id="alice")) == 4 and memory.history(user_id="alice")
            for write in READ_ONLY_WRITES:
                with pytest.raises(StoreError):
                    write(memory)
            assert len(memory.turns(user_id="alice")) == 4
        with SQLiteStore(db, read_only=True) as store:
            assert len(store.namespaces()) == 2
    finally:
        for path, mode in modes.items():
            path.chmod(mode)
    assert snapshot(db) == before, "a read-only open changed the store file"


@pytest.mark.postgres_only("the PostgreSQL meaning of a SQLite test of this file")
@pytest.mark.parametrize("engine", ENGINES)
def test_reading_a_read_only_store_never_writes_on_postgres(tmp_path: Path, engine: str):
    """Memory(dsn, read_only=True), connected as a role that may only SELECT (PostgreSQL's chmod): search, answer,
    export, namespaces, turns, history work, every write raises StoreError, and the database is unchanged."""
    db = tmp_path / "store" / "mem.db"
    make_store(db, engine)
    dsn = store_target(db)
    before = pg_fingerprint(dsn)
    role = "cuemem_reader"
    grants = [f"GRANT USAGE ON SCHEMA cuemem TO {role}", f"GRANT SELECT ON ALL TABLES IN SCHEMA cuemem TO {role}"]
    pg_execute(dsn, f"DROP ROLE IF EXISTS {role}", f"CREATE ROLE {role} LOGIN", *grants)
    reader_dsn = dsn + ("&" if "?" in dsn else "?") + f"user={role}"  # (a query parameter wins over the URI's user)
    try:
        with Memory(
            reader_dsn,
            engine=engine,
            read_only=True,
            embedder=make_memory_kwargs()["embedder"],
            llm=make_memory_kwargs()["llm"],
            llm_cache=str(tmp_path / "llm-calls.db"),
        ) as memory:
            assert memory.store.read_only and memory.store._query("SELECT current_user")[0][0] == role
            assert "d3" in memory.search("allergic to shellfish", user_id="alice", k=4).turn_ids
            memory.answer("Who is allergic to shellfish?", user_id="alice")
            assert memory.export(io.StringIO()) == 5
            assert {ns.user_id for ns, _ in memory.namespaces()} == {"alice", "bob"}
            assert len(memory.turns(user_id="alice")) == 4 and memory.history(user_id="alice")
            for write in READ_ONLY_WRITES:
                with pytest.raises(StoreError):
                    write(memory)
            memory.checkpoint()  # nothing to do on a read-only store, and no error
            assert len(memory.turns(user_id="alice")) == 4
    finally:
        pg_execute(dsn, f"DROP OWNED BY {role}", f"DROP ROLE {role}")
    assert pg_fingerprint(dsn) == before, "a read-only open changed the database"


def make_memory_kwargs() -> dict[str, Any]:
    """The embedder and model client open_memory gives a Memory (for a Memory opened on another DSN)."""
    from fakes import fake_llm

    from cuemem.embed import HashingEmbedder

    return {"embedder": HashingEmbedder(), "llm": fake_llm()}


@contextmanager
def holding_the_writer_lock(db: Path) -> Iterator[None]:
    """Another connection in the middle of a write transaction: on SQLite it holds the file's write lock (BEGIN
    IMMEDIATE); on PostgreSQL the store's writer lock and the locks of a writer on every table of the store."""
    if not on_postgres():
        writer = sqlite3.connect(db, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")  # holds the write lock until ROLLBACK
        try:
            yield
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        return
    import psycopg

    from cuemem.store.postgres import TABLES, WRITE_LOCK

    names = [line.split("(")[0].split()[-1] for line in TABLES.splitlines() if line.startswith("CREATE TABLE")]
    with psycopg.connect(store_target(db)) as conn:  # not autocommit: one transaction until the rollback
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
        conn.execute(f"LOCK TABLE {', '.join('cuemem.' + n for n in names)} IN ROW EXCLUSIVE MODE")
        try:
            yield
        finally:
            conn.rollback()


@pytest.mark.parametrize("mode", ["open", "read_only"])
def test_a_read_does_not_wait_for_a_writer(tmp_path: Path, mode: str):
    """Another connection holds a write transaction: opening the store and reading must not queue behind it. Today
    every open writes (schema script, meta row), so a plain read waited busy_timeout (30 s) and then failed."""
    db = tmp_path / "mem.db"
    make_store(db, "bm25")
    outcome: dict[str, object] = {}

    def read() -> None:
        start = time.perf_counter()
        try:
            if mode == "open":  # an ordinary Memory, used only to read
                with open_memory(db, "bm25") as memory:
                    memory.namespaces()
                    memory.turns(user_id="alice")
                    memory.get("d1", user_id="alice")
                    memory.export(io.StringIO(), user_id="alice")
                    memory.history(user_id="alice")
            else:
                with open_memory(db, "bm25", read_only=True) as memory:
                    memory.search("hotel", user_id="alice")
                    memory.export(io.StringIO())
                    memory.namespaces()
        except Exception as exc:
            outcome["error"] = exc
        outcome["seconds"] = time.perf_counter() - start

    with holding_the_writer_lock(db):
        reader = threading.Thread(target=read)
        reader.start()
        reader.join(2.0)
        blocked = reader.is_alive()
    reader.join(60)
    assert not blocked, f"the read waited behind another connection's write transaction ({outcome})"
    assert "error" not in outcome, outcome
    assert outcome["seconds"] < 1.5  # type: ignore[operator]


def foreign_tables(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
    con.execute("INSERT INTO customers(name) VALUES('Ada'), ('Grace')")
    con.commit()
    con.close()


def foreign_meta(path: Path) -> None:
    """Another application that also calls its key-value table `meta`."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("INSERT INTO meta VALUES('app', 'inventory'), ('version', '7')")
    con.execute("CREATE TABLE items(sku TEXT PRIMARY KEY, stock INTEGER)")
    con.commit()
    con.close()


def not_sqlite(path: Path) -> None:
    path.write_text("name,stock\nbolt,12\n" * 200)


@pytest.mark.sqlite_only("SQLite files of other applications; PostgreSQL: the test below (its schema `cuemem`)")
@pytest.mark.parametrize("make", [foreign_tables, foreign_meta, not_sqlite], ids=lambda f: f.__name__)
@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read_only"])
def test_a_file_of_another_application_is_refused_untouched(tmp_path: Path, make, read_only: bool):
    db = tmp_path / "other.db"
    make(db)
    before = db.read_bytes()
    error: Exception | None = None
    try:
        kwargs = {"read_only": True} if read_only else {}
        open_memory(db, "bm25", **kwargs).close()
    except Exception as exc:
        error = exc
    changed = db.read_bytes() != before
    assert isinstance(error, StoreError) and not changed, (
        f"a file that is not a cuemem store was {'opened' if error is None else f'refused with {error!r}'} and"
        f" {'changed (tables now: ' + ', '.join(tables(db)) + ')' if changed else 'left as it was'}"
    )


@pytest.mark.postgres_only("the PostgreSQL meaning of a SQLite test of this file")
@pytest.mark.parametrize("owner", ["public", "cuemem"])
@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read_only"])
def test_tables_of_another_application_are_left_untouched_on_postgres(tmp_path: Path, read_only: bool, owner: str):
    """A database is shared: another application's tables in `public` stay as they are when cuemem opens it (it
    keeps to its schema `cuemem`); a schema `cuemem` that another application made (its own `meta` table) is refused
    untouched, nothing created first (not even the pgvector extension)."""
    dsn = store_target(tmp_path / "other.db")
    pg_execute(
        dsn,
        f"CREATE SCHEMA IF NOT EXISTS {owner}",
        f"CREATE TABLE {owner}.meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        f"INSERT INTO {owner}.meta VALUES('app', 'inventory'), ('version', '7')",
        f"CREATE TABLE {owner}.customers(id INTEGER PRIMARY KEY, name TEXT NOT NULL)",
        f"INSERT INTO {owner}.customers VALUES(1, 'Ada'), (2, 'Grace')",
    )
    before = pg_fingerprint(dsn)
    error: Exception | None = None
    try:
        open_memory(tmp_path / "other.db", "bm25", read_only=read_only).close()
    except Exception as exc:
        error = exc
    after = pg_fingerprint(dsn)
    if owner == "cuemem" or read_only:  # another application's schema, or nothing cuemem may open read-only
        assert isinstance(error, StoreError), f"the database was opened ({error!r})"
        assert after == before, "a refused database was changed"
    else:
        assert error is None, error
        assert {k: v for k, v in after["rows"].items() if k.startswith("public.")} == before["rows"]
        assert ("cuemem", "meta", "r") in after["relations"]


@pytest.mark.sqlite_only("edits the SQLite file's meta table; PostgreSQL: the test below")
@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read_only"])
def test_a_store_of_a_newer_schema_is_refused_untouched(tmp_path: Path, read_only: bool):
    db = tmp_path / "mem.db"
    make_store(db, "bm25")
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    con.commit()
    con.close()
    before = db.read_bytes()
    error: Exception | None = None
    try:
        kwargs = {"read_only": True} if read_only else {}
        open_memory(db, "bm25", **kwargs).close()
    except Exception as exc:
        error = exc
    assert isinstance(error, StoreError), f"a store of schema version 999 was opened ({error!r})"
    assert "999" in str(error), f"the error should name the file's schema version: {error}"
    assert db.read_bytes() == before


@pytest.mark.postgres_only("the PostgreSQL meaning of a SQLite test of this file")
@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read_only"])
def test_a_store_of_a_newer_schema_is_refused_untouched_on_postgres(tmp_path: Path, read_only: bool):
    db = tmp_path / "mem.db"
    make_store(db, "bm25")
    dsn = store_target(db)
    pg_execute(dsn, "UPDATE cuemem.meta SET value='999' WHERE key='schema_version'")
    before = pg_fingerprint(dsn)
    error: Exception | None = None
    try:
        open_memory(db, "bm25", read_only=read_only).close()
    except Exception as exc:
        error = exc
    assert isinstance(error, StoreError), f"a store of schema version 999 was opened ({error!r})"
    assert "999" in str(error), f"the error should name the database's schema version: {error}"
    assert pg_fingerprint(dsn) == before


# The version-1 schema, as cuemem 0.1.0 wrote it (cuemem/store/sqlite.py at commit 1175fd8): a fixture, frozen here.
SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS namespaces(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL DEFAULT '',
    run_id TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    UNIQUE(user_id, agent_id, run_id)
);
-- The durable log: rows are inserted and deleted, never updated.
CREATE TABLE IF NOT EXISTS turns(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ns INTEGER NOT NULL REFERENCES namespaces(id),
    turn_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    speaker TEXT NOT NULL,
    text TEXT NOT NULL,
    timestamp TEXT,
    metadata TEXT NOT NULL DEFAULT '{}',
    added_at REAL NOT NULL,
    UNIQUE(ns, turn_id)
);
CREATE INDEX IF NOT EXISTS turns_by_ns ON turns(ns, seq);
CREATE INDEX IF NOT EXISTS turns_by_session ON turns(ns, session_id, seq);
-- Derived documents that engines index (a turn, a window, a record ...), in named spaces.
CREATE TABLE IF NOT EXISTS items(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ns INTEGER NOT NULL REFERENCES namespaces(id),
    space TEXT NOT NULL,
    key TEXT NOT NULL,
    text TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    tokens INTEGER NOT NULL DEFAULT 0,
    UNIQUE(ns, space, key)
);
CREATE INDEX IF NOT EXISTS items_by_space ON items(ns, space, id);
-- Provenance: which turns an item came from.
CREATE TABLE IF NOT EXISTS item_turns(
    item INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
    ns INTEGER NOT NULL,
    turn_seq INTEGER NOT NULL,
    PRIMARY KEY(item, turn_seq)
);
CREATE INDEX IF NOT EXISTS item_turns_by_turn ON item_turns(ns, turn_seq);
CREATE TABLE IF NOT EXISTS vectors(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    item INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
    ns INTEGER NOT NULL,
    space TEXT NOT NULL,
    model TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    vec BLOB NOT NULL,
    UNIQUE(item, model)
);
CREATE INDEX IF NOT EXISTS vectors_by_space ON vectors(ns, space, model, id);
CREATE TABLE IF NOT EXISTS labels(
    item INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
    ns INTEGER NOT NULL,
    kind TEXT NOT NULL,
    label TEXT NOT NULL,
    PRIMARY KEY(item, kind, label)
);
CREATE INDEX IF NOT EXISTS labels_by_label ON labels(ns, kind, label);
CREATE TABLE IF NOT EXISTS kv(
    ns INTEGER NOT NULL REFERENCES namespaces(id),
    engine TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY(ns, engine, key)
);
CREATE TABLE IF NOT EXISTS embed_cache(
    ns INTEGER NOT NULL REFERENCES namespaces(id),
    model TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    vec BLOB NOT NULL,
    PRIMARY KEY(ns, text_hash, model)
);
-- How far each engine has ingested each namespace's log (crash-safe catch-up).
CREATE TABLE IF NOT EXISTS watermarks(
    ns INTEGER NOT NULL REFERENCES namespaces(id),
    engine TEXT NOT NULL,
    upto INTEGER NOT NULL,
    PRIMARY KEY(ns, engine)
);
-- Bumped whenever derived rows of a namespace are removed: in-memory indexes rebuild on a new epoch.
CREATE TABLE IF NOT EXISTS epochs(ns INTEGER PRIMARY KEY, epoch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS history(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ns INTEGER,
    at REAL NOT NULL,
    op TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS history_by_ns ON history(ns, id);
"""

V1_TURNS = [  # (namespace, turn id, session, speaker, text, timestamp, metadata)
    (
        ("alice", "", ""),
        "d1",
        "s1",
        "Maya",
        "Day 1 is the Apollo Hotel near Rossio, 120 euros a night.",
        "2024-03-03",
        {},
    ),
    (
        ("alice", "", ""),
        "d2",
        "s1",
        "Maya",
        "For Day 2 I booked Casa Azul in Alfama, 95 euros a night.",
        None,
        {"blip_caption": "a blue door"},
    ),
    (
        ("alice", "", ""),
        "d3",
        "s2",
        "Theo",
        "Lena is allergic to shellfish, be careful at Ramiro.",
        "2024-03-04",
        {"lang": "en"},
    ),
    (("alice", "agent1", "r1"), "r1", "run", "tool", "The weather API says 21 degrees in Lisbon.", None, {}),
    (("bob", "", ""), "b1", "default", "user", "Bob keeps his bike in the hall. 東京 ✓", None, {}),
]


def write_v1_store(path: Path) -> None:
    """A store as version 1 wrote it: the log, history and the meta row; its derived rows were never built."""
    con = sqlite3.connect(path)
    con.executescript(SCHEMA_V1)
    con.execute("INSERT INTO meta(key, value) VALUES('schema_version', '1')")
    ids: dict[tuple[str, str, str], int] = {}
    for key, turn_id, session, speaker, text, stamp, meta in V1_TURNS:
        if key not in ids:
            ids[key] = con.execute(
                "INSERT INTO namespaces(user_id, agent_id, run_id, created_at) VALUES(?,?,?,?)", (*key, 1.7e9)
            ).lastrowid  # type: ignore[assignment]
        con.execute(
            "INSERT INTO turns(ns, turn_id, session_id, speaker, text, timestamp, metadata, added_at)"
            " VALUES(?,?,?,?,?,?,?,?)",
            (ids[key], turn_id, session, speaker, text, stamp, json.dumps(meta, ensure_ascii=False), 1.7e9),
        )
        con.execute(
            "INSERT INTO history(ns, at, op, detail) VALUES(?,?,?,?)",
            (ids[key], 1.7e9, "add", json.dumps({"turn_ids": [turn_id], "skipped": 0})),
        )
    con.commit()
    con.close()


@pytest.mark.sqlite_only("a SQLite file of schema version 1; PostgreSQL stores start at their version 1 (no migration)")
@pytest.mark.parametrize("engine", ["bm25", "hybrid", "stitch"])
def test_an_old_store_is_migrated_and_keeps_every_turn(tmp_path: Path, engine: str):
    db = tmp_path / "old.db"
    write_v1_store(db)
    with open_memory(db, engine) as memory:  # a writable open migrates
        for key, turn_id, session, speaker, text, stamp, meta in V1_TURNS:
            where = {"user_id": key[0], "agent_id": key[1] or None, "run_id": key[2] or None}
            turn = memory.get(turn_id, **where)
            assert (turn.text, turn.session_id, turn.speaker, turn.timestamp, turn.metadata) == (
                text,
                session,
                speaker,
                stamp,
                meta,
            )
        assert [t.id for t in memory.turns(user_id="alice")] == ["d1", "d2", "d3"]
        assert "d3" in memory.search("allergic to shellfish", user_id="alice", k=3).turn_ids
        assert memory.store.integrity_check() == "ok"
    with open_memory(db, engine) as again:  # the migrated store opens as a current one
        assert len(again.turns(user_id="alice")) == 3
        assert {(ns.user_id, ns.agent_id, ns.run_id): n for ns, n in again.namespaces()} == {
            ("alice", None, None): 3,
            ("alice", "agent1", "r1"): 1,
            ("bob", None, None): 1,
        }


def test_a_deleted_turn_leaves_no_byte_in_the_store_file(tmp_path: Path):
    """secure_delete: freed pages are zeroed, so a deleted turn's text (here also spilling onto overflow pages) is
    gone from the file once the WAL is checkpointed. Stock SQLite builds do not zero them unless told to.
    PostgreSQL: the big text lives in the table's TOAST; VACUUM FULL rewrites table, TOAST and indexes."""
    secret = "zqx" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:24]
    with open_memory(tmp_path / "mem.db", "fullcontext") as memory:
        memory.add([{"id": f"o{i}", "text": f"ordinary turn {i}"} for i in range(20)], user_id="u")
        memory.add({"id": "big", "text": f"{secret} " * 800}, user_id="u")  # ~30 KB: overflow pages
        memory.add({"id": "small", "text": f"the code is {secret}"}, user_id="u", session_id="x")
        checkpoint(memory)
        assert files_with(memory, tmp_path, secret)  # it was on disk
        memory.delete("big", user_id="u")
        memory.delete_session("x", user_id="u")
        checkpoint(memory)
        leaks = files_with(memory, tmp_path, secret)
        assert not leaks, f"deleted text is still in the file after a checkpoint: {leaks}"


def test_history_keeps_no_guessable_content_hash(tmp_path: Path):
    """Turn ids of id-less messages were sha1(session, speaker, text, timestamp)[:16], the same in every store, and
    history keeps turn ids after a delete: anyone could confirm a guessed deleted message ("my pin is 4321").
    The derived id must be salted per store, yet stable within one (re-adding stays a no-op, also after a reopen)."""
    message = "my pin is 4321"
    basis = json.dumps(["s", "user", message, None], ensure_ascii=False) + "#1"
    unsalted = hashlib.sha1(basis.encode("utf-8")).hexdigest()
    a_path, b_path = tmp_path / "a" / "a.db", tmp_path / "b" / "b.db"
    a_path.parent.mkdir()
    b_path.parent.mkdir()
    with open_memory(a_path, "bm25") as a, open_memory(b_path, "bm25") as b:
        (id_a,) = a.add(message, user_id="u", session_id="s").added
        (id_b,) = b.add(message, user_id="u", session_id="s").added
        assert a.add(message, user_id="u", session_id="s").skipped == [id_a]  # a retry is still a no-op
        a.delete(id_a, user_id="u")
        history = json.dumps(a.history(user_id="u"))
        assert unsalted[:16] not in history and unsalted not in history, (
            f"history holds the unsalted content hash of the deleted message: {history}"
        )
        checkpoint(a)
        assert not files_with(a, a_path.parent, unsalted[:16])
        assert id_a != id_b, "the same message gets the same id in two stores: ids are guessable from content"
        (again,) = b.add(message, user_id="u", session_id="s").skipped
        assert again == id_b
    with open_memory(b_path, "bm25") as b:  # the salt is the store's: a reopened store derives the same id
        assert b.add(message, user_id="u", session_id="s").skipped == [id_b]


@pytest.mark.sqlite_only("no store is opened: the error class only")
def test_store_error_is_a_public_cuemem_error():
    from cuemem import CuememError, errors

    assert errors.StoreError is StoreError and issubclass(StoreError, CuememError)


# --------------------------------------------------------------------------- review findings, each pinned by a test
@pytest.mark.parametrize("engine", ["hybrid", "stitch"])  # stitch reads its label table in one snapshot
def test_a_search_in_another_thread_does_not_wait_for_an_open_write_transaction(tmp_path: Path, engine: str):
    """Reads outside the writing thread's transaction go through the store's second connection."""
    with open_memory(tmp_path / "m.db", engine) as memory:
        memory.add(TRIP, user_id="alice")
        memory.search("hotel", user_id="alice")
        inside, leave = threading.Event(), threading.Event()

        def writer() -> None:
            with memory.store.transaction():
                inside.set()
                leave.wait(10)

        thread = threading.Thread(target=writer)
        thread.start()
        inside.wait(5)
        try:
            start = time.perf_counter()
            assert "d1" in memory.search("hotel Rossio", user_id="alice").turn_ids[:2]
            assert time.perf_counter() - start < 2
        finally:
            leave.set()
            thread.join()


def test_delete_all_with_a_run_id_deletes_exactly_that_namespace(tmp_path: Path):
    with open_memory(tmp_path / "m.db", "bm25") as memory:
        for agent in (None, "a1", "a2"):
            memory.add({"id": f"x-{agent}", "text": "a turn"}, user_id="alice", agent_id=agent, run_id="r1")
        deleted = memory.delete_all(user_id="alice", run_id="r1")
        assert [(ns.agent_id, ns.run_id) for ns, _ in deleted] == [(None, "r1")]
        assert sorted(str(ns.agent_id) for ns, _ in memory.namespaces()) == ["a1", "a2"]


def test_engine_state_is_refused_to_an_owner_whose_rows_outlive_it(tmp_path: Path):
    """An owner declared on_delete="rows" keeps its derived state in items (which deletes reach), not in kv."""
    from cuemem.store.base import DerivedSpec

    with open_store(store_target(tmp_path / "s.db")) as store:
        store.declare(DerivedSpec("rowsy", ("turn",), "rows"))
        ns = store.namespace_id(__import__("cuemem").Namespace("u"), create=True)
        with pytest.raises(StoreError, match="on_delete='rows'"):
            store.kv_set(ns, "rowsy", "state", {"summary": "quotes a turn"})


@pytest.mark.sqlite_only("SQLite's application_id header field; PostgreSQL has no such field")
def test_an_empty_file_of_another_application_is_refused(tmp_path: Path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA application_id=1234")
    conn.commit()
    conn.close()
    before = snapshot(path)
    with pytest.raises(StoreError, match="another application"):
        SQLiteStore(path)
    assert snapshot(path) == before


def step_of(memory, ns: int, turn_id: str):
    """A turn's stitch step item."""
    (item,) = memory.store.get_items(ns, list(memory.store.item_ids(ns, "stitch:step", [turn_id]).values())).values()
    return item


def test_remembered_embeddings_of_deleted_turns_are_purged(tmp_path: Path):
    """Vocabulary labels and texts embedded ahead of ingest are remembered without an item: a delete purges what no
    surviving item's vector uses."""
    with open_memory(tmp_path / "m.db", "stitch") as memory:
        memory.add(TRIP, user_id="alice")
        store = memory.store
        ns = store.namespace_id(memory.namespace("alice"))
        store.cache_embeddings(ns, "hashing-512", [("label-hash", __import__("numpy").ones(512, dtype="float32"))])
        docs = {t["id"]: text_hash(memory.store.get_turn(ns, t["id"]).speaker + ": " + t["text"]) for t in TRIP}
        assert store.cached_embeddings(ns, "hashing-512", list(docs.values()))  # the steps' documents are cached
        plain = [t for t in ("d1", "d2", "d4") if not step_of(memory, ns, t).meta["resolved"]]
        memory.delete("d3", user_id="alice")
        kept = store.cached_embeddings(ns, "hashing-512", [*docs.values(), "label-hash"])
        assert "label-hash" not in kept and docs["d3"] not in kept  # remembered label and the deleted turn: gone
        # survivors' documents stay for the rebuild, where their vector is their own document (a step that
        # continues the goal in focus is embedded with it instead: tests/test_focus.py)
        assert plain and {docs[t] for t in plain} <= set(kept)


@pytest.mark.sqlite_only("a SQLite reader holding the WAL; PostgreSQL: the test below")
def test_a_checkpoint_blocked_by_a_reader_says_so(tmp_path: Path):
    with open_memory(tmp_path / "m.db", "bm25") as memory:
        memory.add(TRIP, user_id="alice")
        reader = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM turns").fetchone()  # holds a read snapshot
        memory.delete("d1", user_id="alice")
        try:
            with pytest.raises(StoreError, match="could not be truncated"):
                memory.store._conn.execute("PRAGMA busy_timeout=100")
                memory.checkpoint()
        finally:
            reader.execute("COMMIT")
            reader.close()
        memory.checkpoint()  # now it goes through


@pytest.mark.postgres_only("the PostgreSQL meaning of a SQLite test of this file")
def test_a_checkpoint_blocked_by_a_reader_says_so_on_postgres(tmp_path: Path):
    """VACUUM FULL needs each table to itself: behind another session's open transaction it must give up after the
    store's timeout and say so (not wait without end, queueing every read of the table behind it)."""
    import psycopg

    with open_memory(tmp_path / "m.db", "bm25") as memory:
        memory.add(TRIP, user_id="alice")
        memory.store.timeout = 0.5  # type: ignore[attr-defined]
        with psycopg.connect(str(memory.settings.db)) as reader:  # not autocommit: the snapshot stays open
            reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            reader.execute("SELECT COUNT(*) FROM cuemem.turns").fetchone()  # holds the table until its end
            memory.delete("d1", user_id="alice")
            start = time.perf_counter()
            with pytest.raises(StoreError, match=r"checkpoint .* was blocked"):
                memory.checkpoint()
            assert time.perf_counter() - start < 5
            assert [t.id for t in memory.turns(user_id="alice")] == ["d2", "d3", "d4"]  # reads go on
            reader.rollback()
        memory.checkpoint()  # now it goes through
        assert memory.store._query("SHOW lock_timeout")[0][0] == "0"  # type: ignore[attr-defined]


def test_a_variant_with_other_parameters_keeps_its_own_state(tmp_path: Path):
    from cuemem.engines.stitch import variant

    with open_memory(tmp_path / "m.db", "stitch") as memory:
        memory.add(TRIP, user_id="alice")
        other = variant("stitch", k_update=2)
        assert other.name == "stitch[k_update=2]" and other.derived.owner != memory.engine.name
        assert memory.search("hotel", user_id="alice", engine=None).turn_ids
        state = memory.derived_state(user_id="alice")["state"]
        assert set(state) == {"stitch"}


def test_several_locomo_samples_into_one_run_are_refused(tmp_path: Path):
    sample = {"conversation": {"speaker_a": "A", "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}]}}
    path = tmp_path / "two.json"
    path.write_text(json.dumps([{**sample, "sample_id": "x"}, {**sample, "sample_id": "y"}]))
    with open_memory(tmp_path / "m.db", "bm25") as memory:
        with pytest.raises(__import__("cuemem").CuememError, match="its own namespace"):
            memory.ingest_file(path, user_id="u", run_id="r")
        report = memory.ingest_file(path, user_id="u")  # each sample becomes a run
        assert report.added == 2 and sorted(str(ns.run_id) for ns, _ in memory.namespaces()) == ["x", "y"]


@pytest.mark.sqlite_only("migrates a SQLite file of schema version 1; the PostgreSQL store has no older version")
def test_old_namespace_ids_are_normalised_or_kept_reachable_by_the_migration(tmp_path: Path):
    """v1 took ids as given; v2 normalises them (NFC, stripped) and refuses invisible characters. The migration
    brings old ids in line where it can, and a store row a new Namespace would refuse is still listed and deletable."""
    path = tmp_path / "old.db"
    write_v1_store(path)
    con = sqlite3.connect(path)
    for user in (" dora ", "cafe\u0301", "ali\u202ece"):
        ns = con.execute(
            "INSERT INTO namespaces(user_id, agent_id, run_id, created_at) VALUES(?,'','',1.7e9)", (user,)
        ).lastrowid
        con.execute(
            "INSERT INTO turns(ns, turn_id, session_id, speaker, text, timestamp, metadata, added_at)"
            " VALUES(?,?,?,?,?,NULL,'{}',1.7e9)",
            (ns, "t1", "s", "user", f"a turn of {user}"),
        )
    con.commit()
    con.close()
    with open_memory(path, "bm25") as memory:
        users = {ns.user_id for ns, _ in memory.namespaces()}
        assert {"dora", "caf\u00e9", "ali\u202ece"} <= users  # the first two normalised, the third kept as it was
        assert memory.turns(user_id=" dora")[0].id == "t1"
        assert memory.turns(user_id="cafe\u0301")[0].id == "t1"  # NFD finds the NFC namespace
        assert memory.delete_all(user_id="caf\u00e9")[0][1] == 1
        assert memory.delete_all(user_id="ali\u202ece")[0][1] == 1  # refused as a new id, deletable as an old one
        with pytest.raises(ValueError, match="U\\+202E"):
            memory.delete_all(user_id="ali\u202ece")  # gone now: a bad new id is refused again
