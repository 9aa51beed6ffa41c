"""Servers that hold no corpus (issue 36). Indexing off the request path (item 3): adds acknowledged once durable,
a background worker indexes, a search still sees every acknowledged turn, and a worker that fails or stops is
reported, never silent. State per namespace, bounded (item 1): least recently used namespaces leave the cache and
come back from the store, and searches of different namespaces never wait for each other."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import TRIP, held_in_another_thread, open_memory
from test_server import running
from typer.testing import CliRunner

from cuemem import Memory, indexing
from cuemem.cli import app
from cuemem.config import Settings
from cuemem.embed import HashingEmbedder
from cuemem.errors import CuememError, StoreError
from cuemem.server.app import create_app
from cuemem.server.keys import KeyRing
from cuemem.types import Namespace

USER = "maya"


def gated(memory: Memory) -> tuple[threading.Event, list[Namespace]]:
    """Hold the background worker before each pass until the returned event is set (other threads pass through),
    so a test sees the moment between an add's acknowledgement and its indexing."""
    gate = threading.Event()
    seen: list[Namespace] = []
    sync = memory._indexer.sync

    def held(engine: Any, ns: int, namespace: Namespace, progress: Callable[[int], None] | None = None) -> int:
        if threading.current_thread().name == "cuemem-indexer":
            seen.append(namespace)
            assert gate.wait(30), "the test never opened the gate"
        return sync(engine, ns, namespace, progress)

    memory._indexer.sync = held  # type: ignore[method-assign]
    return gate, seen


def test_an_add_returns_before_indexing_and_a_search_still_sees_every_turn(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m.db", "hybrid", index_in_background=True) as memory:
        assert memory.background is not None
        gate, seen = gated(memory)
        result = memory.add(TRIP, user_id=USER, session_id="s1")
        assert len(result.added) == len(TRIP)  # acknowledged: durable in the log ...
        assert memory.pending(user_id=USER) == len(TRIP)  # ... and not indexed yet
        health = memory.background.health()
        assert health.running and health.backlog_turns == len(TRIP) and health.queued_namespaces == 1
        # a search catches its namespace up itself: every acknowledged turn is seen
        hits = memory.search("Who feeds the cat Miso?", user_id=USER, k=3)
        assert hits.turn_ids and hits.turn_ids[0] == "d4"
        gate.set()
        assert memory.background.wait(30)
        assert set(seen) == {Namespace(USER)} and memory.pending(user_id=USER) == 0
        after = memory.background.health()
        assert after.backlog_turns == 0 and after.failures == 0 and after.last_error == ""


def test_the_worker_indexes_adds_in_the_background(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m.db", "stitch", index_in_background=True) as memory:
        assert memory.background is not None
        for i, turn in enumerate(TRIP):
            memory.add(turn, user_id=f"user-{i % 2}", session_id="s1")
        assert memory.background.wait(30)
        assert all(memory.pending(user_id=f"user-{i}") == 0 for i in range(2))
        assert memory.background.health().indexed_turns == len(TRIP)  # the worker did it, not a search


def test_a_failing_pass_is_reported_and_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexing, "RETRY_SECONDS", 0.05)
    with open_memory(tmp_path / "m.db", "bm25", index_in_background=True) as memory:
        assert memory.background is not None
        sync = memory._indexer.sync
        failures = [StoreError("the database is briefly away")]

        def flaky(*args: Any, **kwargs: Any) -> int:
            if failures and threading.current_thread().name == "cuemem-indexer":
                raise failures.pop()
            return sync(*args, **kwargs)

        memory._indexer.sync = flaky  # type: ignore[method-assign]
        memory.add(TRIP, user_id=USER)
        assert memory.background.wait(30)  # tried again after the failure
        health = memory.background.health()
        assert health.failures == 1 and "briefly away" in health.last_error and health.running
        assert memory.pending(user_id=USER) == 0 and health.indexed_turns == len(TRIP)


def test_a_restarted_memory_indexes_what_a_stopped_one_left(tmp_path: Path) -> None:
    """Turns acknowledged by a process that stopped before indexing them are found and indexed at the next start,
    without waiting for a search or an add of their namespace."""
    with open_memory(tmp_path / "m.db", "bm25", index_in_background=True) as memory:
        assert memory.background is not None
        memory.background.close()  # a worker gone before the adds: they are acknowledged, durable, not indexed
        memory.add(TRIP, user_id=USER)
        memory.add(TRIP[:2], user_id="theo")
        assert memory.pending(user_id=USER) == len(TRIP) and memory.pending(user_id="theo") == 2
    with open_memory(tmp_path / "m.db", "bm25", index_in_background=True) as memory:
        assert memory.background is not None
        assert memory.background.wait(30)
        assert memory.pending(user_id=USER) == 0 and memory.pending(user_id="theo") == 0
        assert memory.background.health().indexed_turns == len(TRIP) + 2  # by the worker, at its start


def test_a_namespace_that_keeps_failing_makes_the_worker_unhealthy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(indexing, "RETRY_SECONDS", 0.002)
    monkeypatch.setattr(indexing, "MAX_RETRY_SECONDS", 0.01)
    with open_memory(tmp_path / "m.db", "bm25", index_in_background=True) as memory:
        assert memory.background is not None

        def broken(*args: Any, **kwargs: Any) -> int:
            raise StoreError("disk full")

        memory._indexer.sync = broken  # type: ignore[method-assign]
        memory.add(TRIP, user_id=USER)
        deadline = time.monotonic() + 20
        while memory.background.health().failures < indexing.FAILING and time.monotonic() < deadline:
            time.sleep(0.02)
        health = memory.background.health()
        assert health.running and health.failing_namespaces == 1
        assert "keeps failing" in health.problem and "disk full" in health.problem
        memory.delete_all(user_id=USER)  # deleted: its failures are not held against the worker any more
        assert memory.background.health().failing_namespaces == 0


def test_a_namespace_deleted_before_its_pass_is_no_failure(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m.db", "hybrid", index_in_background=True) as memory:
        assert memory.background is not None
        gate, _ = gated(memory)
        memory.add(TRIP, user_id=USER)
        memory.delete_all(user_id=USER)
        gate.set()
        assert memory.background.wait(30)
        assert memory.background.health().failures == 0 and memory.namespaces() == []


def test_healthz_and_metrics_report_the_backlog_and_a_stopped_worker_is_a_503(tmp_path: Path) -> None:
    memory = open_memory(tmp_path / "m.db", "bm25", index_in_background=True)
    assert memory.background is not None
    ring = KeyRing(tmp_path / "keys")
    token = ring.create(user_id=USER)[1]
    gate, _ = gated(memory)
    try:
        with running(create_app(memory, ring, mcp=False)) as url, httpx.Client(base_url=url) as c:
            added = c.post("/v1/memories", json={"messages": TRIP}, headers={"X-API-Key": token})
            assert added.status_code == 200, added.text
            health = c.get("/healthz").json()
            assert health["status"] == "ok" and health["indexing"]["backlog_turns"] == len(TRIP)
            assert f"cuemem_index_backlog_turns {len(TRIP)}" in c.get("/metrics").text
            gate.set()
            assert memory.background.wait(30)
            assert c.get("/healthz").json()["indexing"]["backlog_turns"] == 0
            assert "cuemem_index_worker_up 1" in c.get("/metrics").text
            memory.background.close()  # the worker is gone: the server says it is not ready, and why
            stopped = c.get("/healthz")
            assert stopped.status_code == 503 and stopped.json()["error"] == "indexer_stopped"
            assert "cuemem_index_worker_up 0" in c.get("/metrics").text
    finally:
        memory.close()
        ring.close()


def test_cuemem_worker_indexes_what_adds_left(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    with Memory(db, engine="bm25", embedder=HashingEmbedder(), index_in_background=True) as memory:
        assert memory.background is not None
        gate, _ = gated(memory)
        memory.add(TRIP, user_id=USER)
        memory.add(TRIP[:2], user_id="theo")
        memory.background.close(timeout=0)  # stopped before its pass: the turns stay unindexed in the log
        gate.set()
    with Memory(db, engine="bm25", embedder=HashingEmbedder()) as memory:
        assert memory.pending(user_id=USER) + memory.pending(user_id="theo") > 0
    r = CliRunner().invoke(app, ["--db", str(db), "--engine", "bm25", "--embedder", "hashing", "worker", "--once"])
    assert r.exit_code == 0, r.output
    assert "indexed" in r.output and "namespaces" in r.output
    with Memory(db, engine="bm25", embedder=HashingEmbedder()) as memory:
        assert memory.pending(user_id=USER) == 0 and memory.pending(user_id="theo") == 0


@pytest.mark.parametrize(("word", "value"), [("true", True), ("1", True), ("off", False), ("0", False)])
def test_boolean_settings_read_words(monkeypatch: pytest.MonkeyPatch, word: str, value: bool) -> None:
    monkeypatch.setenv("CUEMEM_INDEX_IN_BACKGROUND", word)
    assert Settings.load().index_in_background is value


def test_a_bad_boolean_setting_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUEMEM_INDEX_IN_BACKGROUND", "sometimes")
    with pytest.raises(CuememError, match="not a valid bool"):
        Settings.load()


# --------------------------------------------------------------------------- state per namespace, bounded (item 1)
def trip_for(user: int) -> list[dict[str, str]]:
    return [
        {"id": f"{t['id']}-{j}", "speaker": t["speaker"], "text": f"{t['text']} (note {j} of traveller {user})"}
        for j in range(5)
        for t in TRIP
    ]


def test_the_cache_keeps_its_bound_and_reloads_an_evicted_namespace(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m.db", "stitch") as memory:
        for user in range(12):
            memory.add(trip_for(user), user_id=f"u{user}")
        memory.indexes.max_bytes = 0
        first = [memory.search("Who feeds the cat Miso?", user_id=f"u{u}", k=5).turn_ids for u in range(12)]
        one = memory.indexes.nbytes() / memory.indexes.namespaces()  # what one namespace holds, unbounded
        assert one > 0 and memory.indexes.namespaces() == 12 and memory.indexes.evictions == 0
        memory.indexes.max_bytes = int(3.5 * one)  # room for three namespaces
        again = [memory.search("Who feeds the cat Miso?", user_id=f"u{u}", k=5).turn_ids for u in range(12)]
        assert again == first  # an evicted namespace is loaded again from the store: the same results
        assert memory.indexes.namespaces() <= 3 and memory.indexes.nbytes() <= memory.indexes.max_bytes
        assert memory.indexes.evictions >= 9


def test_the_namespace_in_use_is_kept_whatever_the_bound(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m.db", "hybrid", cache_mb=0) as memory:
        memory.indexes.max_bytes = 1
        memory.add(TRIP, user_id="a")
        memory.add(TRIP, user_id="b")
        assert memory.search("Who feeds the cat Miso?", user_id="a", k=1).turn_ids == ["d4"]
        assert memory.search("Who feeds the cat Miso?", user_id="b", k=1).turn_ids == ["d4"]
        assert memory.indexes.namespaces() == 1  # b's, in use; a's went


def test_searches_of_different_namespaces_do_not_wait_for_each_other(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m.db", "stitch") as memory:
        memory.add(TRIP, user_id="a")
        memory.add(TRIP, user_id="b")
        held = memory.indexes.lock_for(memory.store.namespace_id(Namespace("a")))
        with held_in_another_thread(held):
            found: list[list[str]] = []
            other = threading.Thread(target=lambda: found.append(memory.search("Miso?", user_id="b", k=1).turn_ids))
            other.start()
            other.join(20)
            assert found == [["d4"]]  # b's search ran while a's lock was held


def test_a_view_is_measured_by_its_arrays_and_a_sample_of_its_items() -> None:
    import numpy as np

    from cuemem.index.live import approx_nbytes

    assert approx_nbytes(np.zeros(1000, dtype=np.float32)) >= 4000
    small, large = approx_nbytes(["word"] * 10), approx_nbytes(["word"] * 10_000)
    assert 500 * small < large * 1.2 and large > 50_000  # a long list is estimated from a sample, scaled


def test_a_negative_cache_bound_is_refused() -> None:
    with pytest.raises(CuememError, match="cache_mb"):
        Settings.load(cache_mb=-1)


def test_a_delete_waits_for_a_search_building_from_before_it(tmp_path: Path) -> None:
    """What a search that began before a delete builds is dropped with the namespace: the drop takes the
    namespace's lock, so it comes after that search, never before it (which would let the search put it back)."""
    with open_memory(tmp_path / "m.db", "stitch") as memory:
        memory.add(TRIP, user_id="a")
        ns = memory.store.namespace_id(Namespace("a"))
        lock = memory.indexes.lock_for(ns)
        dropped = threading.Event()
        with lock:  # a search in progress
            thread = threading.Thread(target=lambda: (memory.indexes.drop(ns), dropped.set()))
            thread.start()
            assert not dropped.wait(0.3)  # the drop waits for it ...
            memory.indexes.keep_view(ns, "built-from-before", 1, {"text": "deleted"})
        thread.join(10)
        assert dropped.is_set() and memory.indexes.view(ns, "built-from-before", 1) is None  # ... and then drops it


def test_a_turn_deleted_while_it_was_embedded_ahead_leaves_no_cached_vector(tmp_path: Path) -> None:
    """Indexing embeds a batch ahead, outside the write lock; a delete of one of those turns can commit in between
    and purge the embedding cache before the vectors are written to it. The indexer then finds the turn gone from
    its locked read and purges again, so no vector of the deleted text stays (background indexing makes this
    window routine: adds return before indexing)."""
    import sqlite3

    with open_memory(tmp_path / "m.db", "hybrid") as memory:
        engine = memory.engine
        prepare = engine.prepare
        deleted: list[str] = []

        def delete_while_embedding(ctx: Any, turns: Any) -> None:
            if not deleted:  # the batch was read; a delete commits (and purges the cache) while it is embedded ...
                deleted.append("d3")
                memory.delete("d3", user_id=USER)
            prepare(ctx, turns)  # ... and then the read batch's vectors enter the cache, d3's included

        engine.prepare = delete_while_embedding  # type: ignore[method-assign]
        memory._indexer.batch = 100
        memory.add(TRIP, user_id=USER)
        assert deleted == ["d3"] and "d3" not in memory.search("Lena shellfish", user_id=USER, k=5).turn_ids
    with sqlite3.connect(tmp_path / "m.db") as db:
        unused = db.execute(
            "SELECT COUNT(*) FROM embed_cache e WHERE NOT EXISTS"
            " (SELECT 1 FROM vectors v WHERE v.ns = e.ns AND v.text_hash = e.text_hash)"
        ).fetchone()[0]
    assert unused == 0


def test_an_embedder_may_be_named_and_an_answer_stream_must_end_with_an_answer(tmp_path: Path) -> None:
    from cuemem.answer import final

    with Memory(tmp_path / "m.db", engine="bm25", embedder="hashing") as memory:
        assert memory.settings.embedder == "hashing" and memory.embedder.name == HashingEmbedder().name
    with pytest.raises(TypeError, match="not an Answer"):
        final(iter(["some", "text"]))


# --------------------------------------------------------------------------- embedding across namespaces (issue 36)
class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counted, and not `cheap`: as a model is, it is worth batching across namespaces."""

    cheap = False

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []
        self.during: Callable[[], None] | None = None  # run inside the next call (a delete racing the batch)

    def embed(self, texts: Any) -> Any:
        self.calls.append(len(texts))
        if self.during is not None:
            during, self.during = self.during, None
            during()
        return super().embed(texts)


def test_the_new_turns_of_several_namespaces_are_embedded_in_one_call(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    with open_memory(tmp_path / "m.db", "hybrid", embedder=embedder) as memory:
        users = ["ann", "ben", "cal"]
        for user in users:  # logged, not indexed: as adds leave them for the background worker
            ns = memory.store.namespace_id(Namespace(user), create=True)
            memory.store.append_turns(ns, _trip())
        embedded = memory._prepare_across([Namespace(u) for u in users])
        assert embedded == len(TRIP) and embedder.calls == [len(TRIP)]  # one text per distinct document
        memory.index_pending()
        assert embedder.calls == [len(TRIP)], "the passes embedded again what was embedded ahead"
        for user in users:
            assert memory.search("Who feeds the cat Miso?", user_id=user, k=1).turn_ids == ["d4"]


def _trip() -> list[Any]:
    from cuemem.types import Turn

    return [Turn(id=t["id"], text=t["text"], speaker=t.get("speaker", "user"), session_id="s1") for t in TRIP]


def test_a_turn_deleted_during_an_embedding_across_namespaces_is_not_cached(tmp_path: Path) -> None:
    import sqlite3

    embedder = CountingEmbedder()
    with open_memory(tmp_path / "m.db", "hybrid", embedder=embedder) as memory:
        for user in ("ann", "ben"):
            ns = memory.store.namespace_id(Namespace(user), create=True)
            memory.store.append_turns(ns, _trip())
        embedder.during = lambda: memory.delete("d3", user_id="ann")  # commits while the batch is embedded
        memory._prepare_across([Namespace("ann"), Namespace("ben")])
        assert embedder.during is None
    with sqlite3.connect(tmp_path / "m.db") as db:
        (ann,) = db.execute("SELECT id FROM namespaces WHERE user_id='ann'").fetchone()
        cached = {n for (n,) in db.execute("SELECT ns FROM embed_cache").fetchall()}
        counts = dict(db.execute("SELECT ns, COUNT(*) FROM embed_cache GROUP BY ns").fetchall())
    assert cached and counts[ann] == len(TRIP) - 1  # everything of ann's but the deleted turn's document


def test_the_worker_embeds_the_namespaces_due_together_once() -> None:
    groups: list[list[Namespace]] = []
    first, release = threading.Event(), threading.Event()

    def catch_up(namespace: Namespace) -> int:
        if namespace.user_id == "n0":
            first.set()
            assert release.wait(10)
        return 1

    worker = indexing.BackgroundIndexer(catch_up, lambda ns: 0, prepare=groups.append)
    try:
        worker.submit(Namespace("n0"))
        assert first.wait(10)  # alone when its pass began: nothing to batch with
        for i in range(1, 5):
            worker.submit(Namespace(f"n{i}"))
        release.set()
        assert worker.wait(10)
    finally:
        worker.close()
    assert [[ns.user_id for ns in group] for group in groups] == [["n1", "n2", "n3", "n4"]]


def test_a_turn_table_grows_by_the_new_items_and_equals_one_built_anew(tmp_path: Path) -> None:
    """After adds, the hybrid engine's turn table (who said what, when) grows by the new items instead of being
    read again whole (item 1: a search of a namespace being written to must not pay for all of it); after a
    delete it is built anew. Grown or built, it is the same table."""
    from cuemem.engines.refine import turn_table
    from cuemem.engines.structure import TurnTable

    more = [
        {"id": "e1", "speaker": "Theo", "text": "Ines said Miso only eats fish on Sundays."},
        {"id": "e2", "speaker": "Lena", "text": "Ramiro is closed on Mondays, Maya."},
    ]
    with open_memory(tmp_path / "m.db", "hybrid") as memory:
        memory.add(TRIP, user_id=USER, session_id="s1")
        ns = memory.store.namespace_id(Namespace(USER))
        ctx = memory._indexer.context(ns, Namespace(USER))
        first = turn_table(ctx, "turn")
        reads: list[int] = []
        get_items = memory.store.get_items

        def counted(ns: int, ids: Any) -> Any:
            reads.append(len(ids))
            return get_items(ns, ids)

        space_metas = memory.store.space_metas

        def counted_metas(ns: int, space: str, keys: Any = None) -> Any:
            found = space_metas(ns, space, keys)
            reads.append(len(found))
            return found

        memory.store.get_items = counted  # type: ignore[method-assign]
        memory.store.space_metas = counted_metas  # type: ignore[method-assign]
        memory.add(more, user_id=USER, session_id="s2")
        grown = turn_table(ctx, "turn")
        assert reads == [len(more)], "the table was read whole again"
        assert grown is not first and grown.ids[: len(first.ids)] == first.ids
        ids = [i for i, _ in memory.store.items_in_order(ns, "turn")]
        anew = TurnTable.build({i: item.meta for i, item in get_items(ns, ids).items()})
        assert grown == anew
        memory.delete("d3", user_id=USER)
        reads.clear()
        rebuilt = turn_table(ctx, "turn")
        assert reads == [len(TRIP) + len(more) - 1] and len(rebuilt.ids) == len(anew.ids) - 1
        left = [i for i, _ in memory.store.items_in_order(ns, "turn")]
        assert rebuilt == TurnTable.build({i: item.meta for i, item in get_items(ns, left).items()})  # whole metas
    with pytest.raises(ValueError, match="newer items only"):
        anew.grown({anew.ids[0]: {}})
