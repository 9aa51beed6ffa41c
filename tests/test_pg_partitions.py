"""The PostgreSQL store's tables holding user text are hash-partitioned by namespace (issue 36): a delete's scrub
rewrites and locks only the partitions of the namespace it touched, other namespaces' reads and writes do not wait
for it, and a store made before partitions (schema 1) is migrated with every row, counter and HNSW index kept.

PostgreSQL only (the `pg` fixture of test_postgres.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import test_postgres
from fakes import fake_llm
from test_postgres import add_vectors, index_names, unit

from cuemem import Memory, StoreError
from cuemem.embed import HashingEmbedder
from cuemem.store.postgres import PostgresStore
from cuemem.store.postgres_schema import PARTITIONED, PARTITIONS, SCHEMA, TABLES
from cuemem.types import Namespace

pg = test_postgres.pg  # the fixture: a fresh database per label


def connect(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True, options=f"-c search_path={SCHEMA},public")


def partition_files(dsn: str) -> dict[str, int]:
    """Every partition's file node: a VACUUM FULL gives the partitions it rewrote new ones."""
    with connect(dsn) as conn:
        rows = conn.execute(
            "SELECT c.relname, pg_relation_filenode(c.oid) FROM pg_class c JOIN pg_namespace n"
            " ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r' AND c.relispartition",
            (SCHEMA,),
        ).fetchall()
    return {name: node for name, node in rows}


def memory_on(dsn: str) -> Memory:
    """A Memory with the lexical engine, whose scrub waits for the test (flush) rather than a timer."""
    return Memory(dsn, engine="bm25", embedder=HashingEmbedder(), llm=fake_llm(), scrub_after_s=3600)


def suffix_of(store: PostgresStore, ns: int) -> str:
    with store.snapshot():
        return store.partition_of(store._bound.conn, ns)


@contextmanager
def apart(dsn: str) -> Iterator[tuple[Memory, PostgresStore, str, str, str, str]]:
    """A Memory on `dsn` (memory_on), its store, and two users whose rows live in different partitions, with the
    suffixes of their partitions."""
    with memory_on(dsn) as memory:
        store = memory.store
        assert isinstance(store, PostgresStore)
        yield (memory, store, *two_users_apart(store))


def two_users_apart(store: PostgresStore) -> tuple[str, str, str, str]:
    """Two users whose rows live in different partitions, and their partitions' suffixes."""
    mine = suffix_of(store, store.namespace_id(Namespace("user-0"), create=True))
    for i in range(1, 50):
        theirs = suffix_of(store, store.namespace_id(Namespace(f"user-{i}"), create=True))
        if theirs != mine:
            return "user-0", f"user-{i}", mine, theirs
    raise AssertionError("50 namespaces in one partition")


def test_a_new_store_is_partitioned(pg):
    dsn = pg("new")
    with PostgresStore(dsn, timeout=5) as store:
        assert store._query("SELECT value FROM meta WHERE key='partitions'")[0][0] == str(PARTITIONS)
    files = partition_files(dsn)
    assert {f"{table}_p{r}" for table in PARTITIONED for r in range(PARTITIONS)} == set(files)


def test_a_delete_scrubs_only_its_namespace_partitions(pg):
    """One deleted turn: the scrub rewrites the partitions of its namespace (and the namespaces table), not those
    of another namespace, and the turn's text is in no partition afterwards."""
    dsn = pg("scrub")
    with apart(dsn) as (memory, store, first, other, mine, theirs):
        for user in (first, other):
            memory.add(
                [{"id": f"t{i}", "text": f"{user} turn {i} with the secret word kumquat{i}"} for i in range(30)],
                user_id=user,
            )
            memory.search("kumquat3", user_id=user)  # derived state: the index's items
        before = partition_files(dsn)
        memory.delete("t3", user_id="user-0")
        pending = store._scrubber._tables
        assert f"turns{mine}" in pending and not any(name.endswith(theirs) for name in pending)
        assert store._scrubber.flush()
        after = partition_files(dsn)
        rewritten = {name for name in before if after[name] != before[name]}
        assert f"turns{mine}" in rewritten and f"items{mine}" in rewritten
        assert not any(name.endswith(theirs) for name in rewritten), sorted(rewritten)
        assert all(name.endswith(mine) for name in rewritten), sorted(rewritten)
        with connect(dsn) as conn:
            found = conn.execute("SELECT COUNT(*) FROM turns WHERE text LIKE %s", ("%kumquat3%",)).fetchone()[0]
        assert found == 1  # the other namespace's turn t3, not user-0's


def test_a_waited_scrub_outlasts_an_older_snapshot(pg):
    """A transaction older than the delete (here a reader's snapshot; in CI it was PostgreSQL's autovacuum ANALYZE)
    keeps the deleted rows in the rewritten file: flush rewrites again once it ended, within the store's timeout,
    rather than reporting the scrub as left undone."""
    dsn = pg("older")
    with memory_on(dsn) as memory:
        store = memory.store
        assert isinstance(store, PostgresStore)
        memory.add(
            [{"id": f"t{i}", "text": f"turn {i} with the secret word kumquat{i}"} for i in range(10)], user_id="u"
        )
        reader = connect(dsn)
        reader.autocommit = False
        reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT 1").fetchone()  # its snapshot: older than the delete, on no table of the store
        memory.delete("t3", user_id="u")
        assert store._vacuum_full(store._scrubber._tables, 5.0)  # held: the reader may still see the old rows
        ended = threading.Timer(0.5, reader.commit)
        ended.start()
        try:
            assert store._scrubber.flush() and not store._scrubber.pending
        finally:
            ended.join()
            reader.close()


def test_other_namespaces_do_not_wait_for_a_partition_being_scrubbed(pg):
    """While one namespace's partitions are locked as VACUUM FULL locks them, a namespace in another partition
    searches, adds and deletes without waiting, its statements run more than psycopg's prepare threshold (5) times
    so that prepared statements are in use, as in a long-lived server."""
    dsn = pg("locked")
    with apart(dsn) as (memory, _store, _, free_user, mine, _):
        for i in range(8):  # warm: the same statements, past the prepare threshold
            memory.add({"id": f"w{i}", "text": f"warm turn {i} about tea"}, user_id=free_user)
            memory.search("tea", user_id=free_user)
        locker = connect(dsn)
        locker.autocommit = False
        tables = ", ".join(f"{table}{mine}" for table in PARTITIONED)
        locker.execute(f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE")
        done: list[float] = []

        def work() -> None:
            start = time.perf_counter()
            for i in range(8):
                memory.add({"id": f"n{i}", "text": f"new turn {i} about tea"}, user_id=free_user)
                assert memory.search("tea", user_id=free_user)
                memory.get(f"n{i}", user_id=free_user)
            memory.delete("n0", user_id=free_user)
            done.append(time.perf_counter() - start)

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        worker.join(20)
        locker.rollback()
        locker.close()
        worker.join(30)
        assert done and done[0] < 15, "a namespace in another partition waited for the locked one"


# --------------------------------------------------------------------------- from schema 1
def v1_tables() -> list[str]:
    """Schema 1 as cuemem 0.x created it: the same tables, not partitioned (history keyed by its id)."""
    text = TABLES.replace(" PARTITION BY HASH (ns)", "").replace(
        "id BIGSERIAL NOT NULL,\n    ns BIGINT,", "id BIGSERIAL PRIMARY KEY,\n    ns BIGINT,"
    )
    return [statement for statement in text.split(";") if statement.strip()]


def table_digests(dsn: str) -> dict[str, str]:
    """Each of the store's tables' rows, as a digest (through the partitioned parents where there are some)."""
    names = [line.split("(")[0].split()[-1] for line in TABLES.splitlines() if line.startswith("CREATE TABLE")]
    with connect(dsn) as conn:
        return {
            name: conn.execute(
                f"SELECT md5(COALESCE(string_agg(t::text, chr(10) ORDER BY t::text), '')) FROM {name} t"
            ).fetchone()[0]
            for name in names
            if name != "meta"
        }


@pytest.mark.parametrize("partitions", [PARTITIONS, 3])
def test_a_schema_1_store_is_migrated_with_everything_kept(pg, partitions: int):
    """A store filled under schema 2 is copied, row for row, into schema 1's unpartitioned tables (with an HNSW
    index as schema 1 built it); opening that store migrates it: the same rows, the counters go on, the HNSW index
    is on the namespace's partition and used, and searches answer as before."""
    source, target = pg("source"), pg("v1")
    rng = np.random.default_rng(36)
    with PostgresStore(source, hnsw_threshold=50, timeout=5) as store:
        ns = store.namespace_id(Namespace("alice"), create=True)
        add_vectors(store, ns, unit(rng, 80, 16), "a")
    with memory_on(source) as memory:
        memory.add([{"id": f"t{i}", "text": f"turn {i} about the harbour"} for i in range(20)], user_id="bob")
        memory.delete("t5", user_id="bob")
        before = memory.search("harbour turn 7", user_id="bob")
    expected = table_digests(source)

    names = [line.split("(")[0].split()[-1] for line in TABLES.splitlines() if line.startswith("CREATE TABLE")]
    with connect(source) as src, connect(target) as dst:
        dst.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        dst.execute(f"CREATE SCHEMA {SCHEMA}")
        dst.execute("CREATE EXTENSION IF NOT EXISTS vector")
        for statement in v1_tables():
            dst.execute(statement)
        for name in names:
            with (
                src.cursor().copy(f"COPY (SELECT * FROM {name}) TO STDOUT") as out,
                dst.cursor().copy(f"COPY {name} FROM STDIN") as into,
            ):
                for block in out:
                    into.write(block)
        dst.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
        dst.execute("DELETE FROM meta WHERE key='partitions'")
        for table, column in (("turns", "seq"), ("items", "id"), ("vectors", "id"), ("history", "id")):
            dst.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), (SELECT MAX({column}) FROM {table}))"
            )
        (name,) = dst.execute("SELECT name FROM vector_indexes").fetchone()
        dst.execute(
            f"CREATE INDEX {name} ON vectors USING hnsw ((vec::vector(16)) vector_cosine_ops) WHERE ns = {ns}"
            " AND space = 'steps' AND model = 'm'"
        )
        max_seq = dst.execute("SELECT MAX(seq) FROM turns").fetchone()[0]

    with PostgresStore(target, hnsw_threshold=50, timeout=5, partitions=partitions) as store:  # the migration
        assert store._query("SELECT value FROM meta WHERE key='schema_version'")[0][0] == "2"
        assert store._query("SELECT value FROM meta WHERE key='partitions'")[0][0] == str(partitions)
        with store.snapshot():
            suffix = store.partition_of(store._bound.conn, ns)
    assert table_digests(target) == expected
    assert index_names(target) == {name}
    with connect(target) as conn:
        assert conn.execute("SELECT tablename FROM pg_indexes WHERE indexname = %s", (name,)).fetchone()[0] == (
            f"vectors{suffix}"
        )
        assert not conn.execute("SELECT 1 FROM pg_class WHERE relname LIKE 'v1\\_%'").fetchone()
    with memory_on(target) as memory:
        assert memory.search("harbour turn 7", user_id="bob").turn_ids == before.turn_ids
        memory.add({"id": "new", "text": "a turn after the migration"}, user_id="bob")
        assert memory.store._query("SELECT seq FROM turns WHERE turn_id='new'")[0][0] > max_seq


def test_a_failed_migration_leaves_schema_1_as_it_was(pg):
    """The migration is one transaction: if it fails half-way, the store is schema 1 still, rows and all."""
    dsn = pg("failed")
    with connect(dsn) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        for statement in v1_tables():
            conn.execute(statement)
        conn.execute("INSERT INTO meta VALUES ('schema_version', '1'), ('salt', '00')")
        conn.execute("INSERT INTO namespaces(user_id, created_at) VALUES ('u', 0)")
        conn.execute(
            "INSERT INTO turns(ns, turn_id, session_id, speaker, text, added_at) VALUES (1, 't', '', 'u', 'x', 0)"
        )
        conn.execute("CREATE TABLE v1_turns(x INT)")  # in the migration's way: renaming turns to it fails
    with pytest.raises(StoreError, match="v1_turns"):
        PostgresStore(dsn, timeout=5)
    with connect(dsn) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "1"
        assert conn.execute("SELECT text FROM turns").fetchall() == [("x",)]
        assert conn.execute("SELECT relkind::text FROM pg_class WHERE relname = 'turns'").fetchone()[0] == "r"


def test_a_checkpoint_skips_only_partitions_that_never_held_a_row(pg):
    """checkpoint() rewrites every partition that holds or held a row, and leaves alone those that never did. A
    partition emptied by a delete and truncated by a plain VACUUM still counts: its indexes keep the pages where
    its keys were (text: turn ids), so it is rewritten too."""
    dsn = pg("checkpoint")
    with apart(dsn) as (memory, store, first, _, mine, _):
        memory.add([{"id": f"secret-id-{i}", "text": f"turn {i}"} for i in range(40)], user_id=first)
        memory.delete_all(user_id=first)
        store._scrubber.done()  # (no scrub: the test looks at what a checkpoint picks)
        with connect(dsn) as conn:
            conn.execute(f"VACUUM turns{mine}")  # dead rows pruned, the empty heap truncated to 0 pages
            assert conn.execute("SELECT pg_relation_size(%s)", (f"turns{mine}",)).fetchone()[0] == 0
        written = set(store._ever_written())
        assert f"turns{mine}" in written and "namespaces" in written and "history" not in written
        assert {name for name in written if name.startswith("turns_p")} == {f"turns{mine}"}  # no other held turns
        before = partition_files(dsn)
        memory.checkpoint()
        after = partition_files(dsn)
        assert {name for name in before if after[name] != before[name]} == written & set(before)
        assert after[f"turns{mine}"] != before[f"turns{mine}"]
        assert set(store._ever_written()) <= written  # rewritten empty: its indexes are bare metapages again
