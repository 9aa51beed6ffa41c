"""Crash safety: a process killed with SIGKILL mid-ingest leaves every acknowledged turn readable and the store
consistent; on the next use every engine catches up to exactly the derived state of one sequential ingest.

On PostgreSQL the killed writer's connections just drop: the server rolls back its open transaction (and releases the
writer lock) when it notices. The check waits until the server has ended every session of the dead writer, so it reads
what the server kept, not a transaction still in flight."""

from __future__ import annotations

import io
import textwrap
import time
from pathlib import Path

import pytest
from conftest import ENGINES, Forker, derived_state, on_postgres, open_memory, state_diff, store_target

WRITER = textwrap.dedent(
    """
    import sys
    from cuemem import Memory
    from cuemem.embed import HashingEmbedder
    from fakes import fake_llm

    def text(i):
        lines = [f"turn number {i} about hotel {i % 7}", f"Did you book it for day {i}?",
                 f"The price of hotel {i % 7} is {50 + i} euros a night."]
        return lines[i % 3]

    path, engine, batch, cache = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    memory = Memory(path, engine=engine, embedder=HashingEmbedder(), llm=fake_llm(), llm_cache=cache)
    n = 0
    while True:
        turns = [{"id": f"t{n + i}", "text": text(n + i)} for i in range(batch)]
        memory.add(turns, user_id="crash", session_id=f"s{n // 100}")
        n += batch
        print(" ".join(t["id"] for t in turns), flush=True)  # acknowledged: add() returned
    """
)
# One batch size per engine; hybrid also ingests turn by turn (a kill then lands between a turn and its index).
CASES = [(engine, 40) for engine in ENGINES if engine != "hybrid"] + [("hybrid", 1), ("hybrid", 40)]


def sessions_of_others(dsn: str) -> list[tuple[int, str | None, bool]]:
    """(pid, state, in a transaction) of every other server session on the test's database."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid, state, xact_start IS NOT NULL FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return [(int(pid), state, bool(open_)) for pid, state, open_ in rows]


def wait_until_the_server_dropped_the_writer(dsn: str, timeout: float = 30.0) -> None:
    """PostgreSQL: the killed client's backends end (their open transaction rolled back, the writer lock freed)."""
    deadline = time.time() + timeout
    while left := sessions_of_others(dsn):
        assert time.time() < deadline, f"the server still serves the killed writer's sessions: {left}"
        time.sleep(0.01)


@pytest.mark.parametrize(("engine", "batch"), CASES)
def test_sigkill_mid_ingest_keeps_acknowledged_turns(tmp_path: Path, engine: str, batch: int, forker: Forker):
    db = tmp_path / "crash.db"
    target_db = store_target(db)  # the child opens the same store (on PostgreSQL: the same database)
    writer = forker.start(WRITER, target_db, engine, str(batch), str(tmp_path / "llm-calls.db"))
    target = 120  # three acknowledged batches of 40 (or 120 single turns) before the kill

    def acknowledged() -> list[str]:
        return [turn_id for line in writer.lines() for turn_id in line.split()]

    writer.wait_for(lambda: len(acknowledged()) >= target, timeout=60)
    if on_postgres():  # kill it inside a write transaction (it spends nearly all its time in one)
        deadline = time.time() + 10
        while not any(in_transaction for _, _, in_transaction in sessions_of_others(target_db)):
            assert time.time() < deadline, "the writer holds no transaction on the PostgreSQL database"
    writer.kill()
    done = acknowledged()
    if on_postgres():
        assert not db.exists(), "the writer wrote a SQLite file instead of the PostgreSQL database"
        wait_until_the_server_dropped_the_writer(target_db)

    query = "turn number 3 about hotel 3"
    with open_memory(db, engine) as memory:
        assert memory.store.integrity_check() == "ok"
        stored = [t.id for t in memory.turns(user_id="crash")]
        assert set(done) <= set(stored), f"acknowledged turns lost: {sorted(set(done) - set(stored))[:10]}"
        assert len(stored) == len(set(stored))
        # Indexing may lag the log after a crash; the next search catches it up completely.
        result = memory.search(query, user_id="crash", k=5)
        assert result.hits and set(result.turn_ids) <= set(stored)
        log = io.StringIO()
        assert memory.export(log, user_id="crash") == len(stored)
        (tmp_path / "sequential").mkdir()
        with open_memory(tmp_path / "sequential" / "fresh.db", engine) as fresh:
            report = fresh.import_(log.getvalue().splitlines())
            assert report.added == len(stored) and not report.errors
            fresh.search(query, user_id="crash", k=5)  # the same operations on both stores
            diff = state_diff(derived_state(memory, user_id="crash"), derived_state(fresh, user_id="crash"))
        assert not diff, "after the crash (first) vs one sequential ingest (second):\n" + "\n".join(diff)
        assert memory.store.integrity_check() == "ok"
