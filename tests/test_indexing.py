"""Indexing off the request path (issue 36, item 3): adds acknowledged once durable, a background worker indexes,
a search still sees every acknowledged turn, and a worker that fails or stops is reported, never silent."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import TRIP, open_memory
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
        assert seen == [Namespace(USER)] and memory.pending(user_id=USER) == 0
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
