"""Crash safety: a process killed with SIGKILL mid-ingest leaves every acknowledged turn readable and the store
consistent; the engines catch up from their watermarks on the next use."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cuemem import Memory
from cuemem.embed import HashingEmbedder

WRITER = textwrap.dedent(
    """
    import sys
    from cuemem import Memory
    from cuemem.embed import HashingEmbedder
    path, batch = sys.argv[1], int(sys.argv[2])
    memory = Memory(path, engine="hybrid", embedder=HashingEmbedder())
    n = 0
    while True:
        turns = [{"id": f"t{n + i}", "text": f"turn number {n + i} about hotel {(n + i) % 7}"} for i in range(batch)]
        memory.add(turns, user_id="crash", session_id=f"s{n // 100}")
        n += batch
        print(" ".join(t["id"] for t in turns), flush=True)  # acknowledged: add() returned
    """
)


@pytest.mark.parametrize("batch", [1, 40])
def test_sigkill_mid_ingest_keeps_acknowledged_turns(tmp_path: Path, batch: int):
    db = tmp_path / "crash.db"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db), str(batch)], stdout=subprocess.PIPE, text=True, env=env
    )
    acknowledged: list[str] = []
    deadline = time.time() + 60
    assert proc.stdout is not None
    while len(acknowledged) < 400 and time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        acknowledged += line.split()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(acknowledged) >= 400, "the writer did not get far enough"

    with Memory(db, engine="hybrid", embedder=HashingEmbedder()) as memory:
        assert memory.store.integrity_check() == "ok"
        stored = {t.id for t in memory.turns(user_id="crash")}
        assert set(acknowledged) <= stored  # every acknowledged turn is there
        ns = memory.store.namespace_id(memory.namespace("crash"))
        # Indexing may lag the log after a crash; the next search catches it up completely.
        result = memory.search("turn number 3 about hotel 3", user_id="crash", k=5)
        assert "t3" in result.turn_ids
        assert memory.store.watermark(ns, "hybrid@hashing-512") == max(t.seq for t in memory.turns(user_id="crash"))
        q = memory.store._query
        assert q("SELECT COUNT(*) FROM items WHERE ns=?", (ns,))[0][0] == len(stored)
        assert q("SELECT COUNT(*) FROM vectors WHERE ns=?", (ns,))[0][0] == len(stored)
        # No item without provenance, no provenance pointing at a missing turn.
        assert (
            q("SELECT COUNT(*) FROM items i WHERE NOT EXISTS (SELECT 1 FROM item_turns it WHERE it.item=i.id)")[0][0]
            == 0
        )
        assert (
            q("SELECT COUNT(*) FROM item_turns it WHERE NOT EXISTS (SELECT 1 FROM turns t WHERE t.seq=it.turn_seq)")[0][
                0
            ]
            == 0
        )
