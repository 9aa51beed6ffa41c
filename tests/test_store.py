"""The store's own guarantees: races between deletes and indexing, concurrent searches, transactions,
namespace ids, durability settings and clear errors on files that are not stores."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import TRIP

from cuemem import CuememError, Memory
from cuemem.embed import HashingEmbedder
from cuemem.engines.baselines import TURN_SPACE, BM25Engine
from cuemem.store.base import DerivedSpec, NewItem
from cuemem.store.sqlite import SQLiteStore, StoreError


def test_commits_are_durable_and_wal():
    store = SQLiteStore(":memory:")
    assert store._query("PRAGMA foreign_keys")[0][0] == 1
    file_store = SQLiteStore(Path(__file__).parent / ".." / ".pytest_cache" / "durable.db")
    assert file_store._query("PRAGMA journal_mode")[0][0] == "wal"
    assert file_store._query("PRAGMA synchronous")[0][0] == 2  # FULL
    file_store.close()


class _Refusing:
    """A connection whose first `refusals` journal-mode switches fail with `error` (what a racing process causes)."""

    def __init__(self, conn, refusals: int, error: str) -> None:
        self.conn, self.refusals, self.error, self.tries = conn, refusals, error, 0

    def execute(self, sql: str, *args):
        if sql.startswith("PRAGMA journal_mode"):
            self.tries += 1
            if self.tries <= self.refusals:
                import sqlite3

                raise sqlite3.OperationalError(self.error)
        return self.conn.execute(sql, *args)


def test_the_switch_to_wal_waits_out_a_racing_process_then_gives_up(tmp_path):
    store = SQLiteStore(tmp_path / "race.db", timeout=0.5)
    real = store._conn
    try:
        store._conn = refusing = _Refusing(real, 3, "database is locked")
        store._wal()  # answered "locked" three times, then switched
        assert refusing.tries == 4
        store._conn = refusing = _Refusing(real, 10**6, "database is locked")
        with pytest.raises(Exception, match="locked"):
            store._wal()  # still locked at the timeout: the error, not a hang
        assert refusing.tries > 1
        store._conn = refusing = _Refusing(real, 1, "disk I/O error")
        with pytest.raises(Exception, match="disk I/O"):
            store._wal()  # any other error is not retried
        assert refusing.tries == 1
    finally:
        store._conn = real
        store.close()


def test_a_delete_racing_the_indexer_never_resurrects_a_turn(make_memory):
    memory = make_memory("bm25")
    namespace = memory.namespace("maya")
    ns = memory.store.namespace_id(namespace, create=True)
    from cuemem.types import Turn

    memory.store.append_turns(ns, [Turn(id="x", text="the secret hotel code is 4512")])
    snapshot = list(memory.store.iter_turns(ns))  # the indexer has read the turn ...
    memory.store.delete_turns(ns, ["x"])  # ... a delete lands ...
    BM25Engine().ingest(memory._context(ns, namespace), snapshot)  # ... and the indexer writes
    assert memory.store._query("SELECT COUNT(*) FROM items")[0][0] == 0
    # The same for vectors of an item deleted while it was being embedded.
    memory.add({"id": "y", "text": "another turn"}, user_id="maya")
    item = memory.store.item_ids(ns, TURN_SPACE, ["y"])["y"]
    memory.store.delete_turns(ns, ["y"])
    memory.store.put_vectors(ns, TURN_SPACE, "m", [(item, "h", np.ones(3, dtype=np.float32))])
    assert memory.store._query("SELECT COUNT(*) FROM vectors")[0][0] == 0
    assert memory.store._query("SELECT COUNT(*) FROM embed_cache")[0][0] == 0


def test_a_partially_deleted_item_is_removed_and_engines_replay(make_memory):
    memory = make_memory("bm25")
    memory.add(TRIP, user_id="maya")
    ns = memory.store.namespace_id(memory.namespace("maya"))
    seqs = [t.seq for t in memory.turns(user_id="maya")]
    memory.store.declare(DerivedSpec("bm25", ("turn", "window"), "rows"))
    memory.store.put_items(ns, "window", [NewItem("w1", "a window over d1 and d2", {}, seqs[:2], 5)])
    assert memory.store.watermark(ns, "bm25") == seqs[-1]
    memory.delete("d1", user_id="maya")
    assert memory.store._query("SELECT COUNT(*) FROM items WHERE space='window'")[0][0] == 0
    # Only the owner of the partly deleted item steps back, to just before its first surviving turn.
    assert memory.store.watermark(ns, "bm25") == seqs[1] - 1
    assert set(memory.search("hotel euros night", user_id="maya", k=10).turn_ids) == {"d2"}
    assert memory.store.watermark(ns, "bm25") == seqs[-1]


def test_space_metas_reads_what_get_items_reads_cut_to_the_keys_asked(make_memory):
    """Store.space_metas: the metadata of a space's items that cite a turn (those of items_in_order), whole or cut
    to the keys asked; nothing of another space, another namespace or an item citing no turn."""
    memory = make_memory("bm25")
    memory.add(TRIP, user_id="maya")
    memory.add(TRIP, user_id="other")
    ns = memory.store.namespace_id(memory.namespace("maya"))
    seqs = [t.seq for t in memory.turns(user_id="maya")]
    metas = [{"speaker": "Maya", "people": ["Ines"], "date": "2024-05-01", "extra": {"deep": [1, 2]}}, {"form": 2}]
    items = [NewItem(f"m{i}", f"item {i}", meta, seqs[:1], 3) for i, meta in enumerate(metas)]
    memory.store.put_items(ns, "window", [*items, NewItem("lone", "cites no turn", {"speaker": "X"}, [], 1)])
    ids = [i for i, _ in memory.store.items_in_order(ns, "window")]
    whole = {i: item.meta for i, item in memory.store.get_items(ns, ids).items()}
    assert memory.store.space_metas(ns, "window") == whole and sorted(map(str, whole.values())) == sorted(
        map(str, metas)
    )
    cut = memory.store.space_metas(ns, "window", ("speaker", "date", "form", "absent"))
    assert sorted(map(str, cut.values())) == sorted(map(str, [{"speaker": "Maya", "date": "2024-05-01"}, {"form": 2}]))
    turns = memory.store.space_metas(ns, "turn", ("speaker",))
    assert len(turns) == len(TRIP) and set(turns) == {i for i, _ in memory.store.items_in_order(ns, "turn")}
    assert memory.store.space_metas(ns, "absent") == {} and memory.store.space_metas(ns + 999, "turn") == {}


def test_concurrent_searches_and_adds_stay_consistent(make_memory):
    memory = make_memory("hybrid")
    memory.add(TRIP, user_id="maya")
    errors: list[BaseException] = []
    stop = threading.Event()

    def searcher() -> None:
        try:
            while not stop.is_set():
                ids = memory.search("hotel night turn", user_id="maya", k=100).turn_ids
                assert len(ids) == len(set(ids)), ids
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=searcher) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(60):
        memory.add({"id": f"n{i}", "text": f"turn {i} about the hotel night"}, user_id="maya")
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    # the index catches up at search time: the searchers may have stopped before the last add committed
    memory.search("hotel night turn", user_id="maya", k=100)
    ns = memory.store.namespace_id(memory.namespace("maya"))
    bm25 = memory.indexes._entries[(ns, TURN_SPACE, "extended")].index
    assert len(bm25) == len(set(bm25.keys)) == 64  # every row, none added twice


def test_a_new_namespace_never_inherits_a_stale_cache(tmp_path):
    path = tmp_path / "shared.db"
    with Memory(path, engine="bm25", embedder=HashingEmbedder()) as a, Memory(path, engine="bm25") as b:
        a.add(TRIP, user_id="old")
        assert a.search("hotel", user_id="old").turn_ids  # `a` caches the namespace's index
        b.delete_all(user_id="old")
        b.add({"id": "z", "text": "a hotel in Porto"}, user_id="new")
        assert b.store.namespace_id(b.namespace("new")) != 1  # ids are never reused
        assert a.search("hotel", user_id="new", k=10).turn_ids == ["z"]


def test_nested_transaction_failure_undoes_only_its_own_writes(make_memory):
    store = make_memory("bm25").store
    with store._write() as c:
        c.execute("INSERT INTO meta(key, value) VALUES('outer', '1')")
        with pytest.raises(RuntimeError), store._write() as inner:
            inner.execute("INSERT INTO meta(key, value) VALUES('inner', '1')")
            raise RuntimeError("boom")
    keys = {k for (k,) in store._query("SELECT key FROM meta")}
    assert "outer" in keys and "inner" not in keys
    with store._write() as c:  # the connection is usable afterwards
        c.execute("INSERT INTO meta(key, value) VALUES('after', '1')")


def test_a_file_that_is_not_a_store_gets_a_clear_error(tmp_path):
    bogus = tmp_path / "notes.txt"
    bogus.write_text("these are my notes, not a database " * 100)
    with pytest.raises(StoreError, match=r"cannot open .* as a cuemem store"):
        SQLiteStore(bogus)
    with pytest.raises(CuememError):
        Memory(bogus)
    assert bogus.read_text().startswith("these are my notes")  # and it is left as it was


def _plans_of(memory, action) -> list[tuple[str, str]]:
    statements: list[str] = []
    connections = [memory.store._conn, memory.store._reader]  # writes, and reads outside a write transaction
    for conn in connections:
        conn.set_trace_callback(statements.append)
    try:
        action()
    finally:
        for conn in connections:
            conn.set_trace_callback(None)
    out = []
    for sql in statements:
        if sql.lstrip().upper().startswith(("SELECT", "DELETE", "INSERT")):
            plan = " | ".join(row[3] for row in memory.store._query("EXPLAIN QUERY PLAN " + sql))
            out.append((sql, plan))
    return out


@pytest.mark.parametrize("engine", ["bm25", "dense", "hybrid"])
def test_hot_paths_never_scan_a_whole_namespace(make_memory, engine):
    """Every statement of a warm search, an add and a delete must find its rows by a key beyond the namespace:
    a plan that walks all of a namespace's rows makes each call O(history) (it happened twice; BENCHMARKS.md)."""
    memory = make_memory(engine)
    memory.add([{"id": f"t{i}", "text": f"turn {i} hotel"} for i in range(50)], user_id="maya")
    memory.search("hotel", user_id="maya")  # warm: in-memory indexes built
    plans = _plans_of(memory, lambda: memory.search("hotel turn 7", user_id="maya", budget_tokens=500))
    plans += _plans_of(memory, lambda: memory.add({"id": "new", "text": "one more hotel"}, user_id="maya"))
    plans += _plans_of(memory, lambda: memory.delete("t3", user_id="maya"))
    assert len(plans) > 10
    for sql, plan in plans:
        if sql.startswith("SELECT COUNT(*) FROM turns t WHERE t.ns = n.id"):
            continue  # namespaces(): counting a namespace is O(its size) by nature
        if sql.endswith("ORDER BY seq DESC LIMIT 1"):
            continue  # the newest turn: one step down the (ns, seq) index
        if "FROM derived_specs" in sql:
            continue  # the engines' declarations: a handful of rows, no user data
        if sql.startswith("DELETE FROM embed_cache WHERE ns=") and "NOT IN" in sql:
            continue  # forgetting: remembered embeddings no surviving item uses go, by design
        if sql.startswith("DELETE FROM llm_calls WHERE ns="):
            continue  # forgetting: a delete purges every model call cached for the namespace, by design
        assert "SCAN" not in plan or "SCAN CONSTANT ROW" in plan, (sql, plan)
        for prefix_only in ("(ns=?)", "(ns=? AND space=?)", "(ns=? AND space=? AND model=?)"):
            assert prefix_only not in plan, (sql, plan)


def test_a_full_disk_says_disk_full_and_keeps_what_was_stored(make_memory):
    """SQLITE_FULL (here: the page limit reached) used to surface as 'cannot rollback - no transaction is active'."""
    memory = make_memory("bm25")
    memory.add(TRIP, user_id="maya")
    store = memory.store
    pages = store._query("PRAGMA page_count")[0][0]
    store._conn.execute(f"PRAGMA max_page_count={pages}")  # the disk is full from now on
    big = [{"id": f"big{i}", "text": "x" * 200_000} for i in range(3)]
    with pytest.raises(CuememError, match="disk full") as caught:
        memory.add(big, user_id="maya")
    assert "cannot rollback" not in str(caught.value)
    assert [t.id for t in memory.turns(user_id="maya")] == ["d1", "d2", "d3", "d4"]
    store._conn.execute(f"PRAGMA max_page_count={2**31}")
    assert memory.add(big, user_id="maya").added == ["big0", "big1", "big2"]
