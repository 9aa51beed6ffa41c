"""Seconds from an acknowledged HTTP delete until no byte of the deleted text is in the store's files (issue 33), on
SQLite (main file, -wal, -shm) and PostgreSQL (the database's folder base/<oid>), with no checkpoint called: the
store's own scrub after deletes (cuemem/store/scrub.py). And what that scrub costs on PostgreSQL at realistic sizes:
seconds of VACUUM FULL per table (each table is locked ACCESS EXCLUSIVE for its own rewrite) at 10k and 100k turns.

    python benchmarks/delete_to_disk.py latency --store sqlite --turns 2000 --reps 5
    python benchmarks/delete_to_disk.py latency --store postgres --turns 2000 --reps 2
    python benchmarks/delete_to_disk.py pg-cost --turns 10000,100000
    python benchmarks/delete_to_disk.py pg-scrub postgresql://... --probes 3   # an existing store, e.g. 1M turns

PostgreSQL is a throwaway pgserver instance in a temporary folder (pip install pgserver). Results go to stdout as
JSON lines and a summary; docs/benchmarks/forgetting.md keeps the figures.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cuemem import Memory
from cuemem.embed import HashingEmbedder

FILLER = [
    "We are planning a trip to Porto in May and want a hotel near the river.",
    "I will look for train tickets on Friday, the early one is cheaper.",
    "The gym changed my locker to a bigger one near the showers.",
    "Lena is allergic to shellfish, so we should avoid the seafood place.",
]


def filler(n: int, start: int = 0) -> list[dict[str, str]]:
    """n ordinary turns with distinct ids and slightly varied text."""
    return [{"id": f"f{i}", "text": f"{FILLER[i % len(FILLER)]} (note {i})"} for i in range(start, start + n)]


class Pg:
    """A throwaway PostgreSQL (pgserver) and databases in it."""

    def __init__(self) -> None:
        import pgserver

        self.root = Path(tempfile.mkdtemp(prefix="cuemem-del-pg-"))
        self.server = pgserver.get_server(self.root, cleanup_mode="delete")
        self.uri = self.server.get_uri()

    def database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.uri, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.uri.replace("/postgres?", f"/{name}?", 1)

    def folder(self, dsn: str) -> Path:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            oid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]
        return Path(self.server.pgdata) / "base" / str(oid)


def files_holding(paths: list[Path], needle: bytes) -> list[str]:
    """The files (under folders, recursively) whose bytes contain `needle`."""
    found = []
    for path in paths:
        for file in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
            try:
                if needle in file.read_bytes():
                    found.append(str(file))
            except FileNotFoundError:  # a file PostgreSQL removed meanwhile
                continue
    return found


def latency(store: str, turns: int, reps: int, scrub_after: float | None) -> dict[str, Any]:
    """Per rep: add a secret turn for alice, search it, delete it over HTTP (fastapi TestClient, alice's key), then
    poll the store's files every 20 ms until no byte of the secret is left; seconds from the 200 to that."""
    from fastapi.testclient import TestClient

    from cuemem.server.app import create_app
    from cuemem.server.keys import KeyRing
    from cuemem.server.limits import Limits

    tmp = Path(tempfile.mkdtemp(prefix="cuemem-del-"))
    pg = Pg() if store == "postgres" else None
    target = pg.database("delete_to_disk") if pg else str(tmp / "mem.db")
    memory = Memory(target, engine="hybrid", embedder=HashingEmbedder())
    if scrub_after is not None:
        memory.store._scrubber.delay = scrub_after  # type: ignore[attr-defined]
    delay = memory.store._scrubber.delay  # type: ignore[attr-defined]
    for lo in range(0, turns, 500):
        memory.add(filler(min(500, turns - lo), lo), user_id="filler")
    roots = [pg.folder(target)] if pg else [tmp / "mem.db", tmp / "mem.db-wal", tmp / "mem.db-shm"]
    ring = KeyRing(tmp / "keys.db")
    token = ring.create(user_id="alice")[1]
    seconds = []
    with TestClient(create_app(memory, ring, Limits(rate=0), mcp=False)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        for rep in range(reps):
            secret = "zqx" + secrets.token_hex(12)
            memory.add({"id": f"secret{rep}", "text": f"The code for my locker is {secret}."}, user_id="alice")
            hits = client.get("/v1/memories/search", params={"q": "locker code", "k": 5}).json()["hits"]
            assert any(secret in h["text"] for h in hits)
            if pg:
                memory.checkpoint()  # PostgreSQL writes table files at checkpoints: the secret on disk first
            assert files_holding(roots, secret.encode()), "the secret should be on disk before the delete"
            response = client.delete(f"/v1/memories/secret{rep}")
            acknowledged = time.monotonic()
            assert response.status_code == 200, response.text
            while files_holding(roots, secret.encode()):
                if time.monotonic() - acknowledged > delay + 300:
                    raise SystemExit(f"{store}: the secret is still on disk {delay + 300:.0f} s after the delete")
                time.sleep(0.02)
            seconds.append(time.monotonic() - acknowledged)
            print(json.dumps({"store": store, "rep": rep, "seconds": round(seconds[-1], 3)}), flush=True)
    memory.close()
    ring.close()
    return {
        "store": store,
        "turns": turns,
        "scrub_after_s": delay,
        "reps": reps,
        "median_s": round(statistics.median(seconds), 3),
        "max_s": round(max(seconds), 3),
    }


def bulk_load(memory: Memory, n: int, batch: int = 2000) -> None:
    """n turns with what the hybrid engine stores for each (a turn item and its vector), through the store's own
    methods (fast; benchmarks/scale_phases.py loads the same way)."""
    from cuemem.engines.baselines import turn_words
    from cuemem.store.base import NewItem, text_hash
    from cuemem.types import Turn

    store: Any = memory.store
    ns = store.namespace_id(memory.namespace("bench"), create=True)
    build = getattr(store, "_maybe_index", None)
    if build is not None:  # the HNSW index is built once after the load (inserting into it is slow)
        store._maybe_index = lambda *a, **k: None
    hybrid = memory._engine("hybrid")
    store.declare(hybrid.derived)
    for lo in range(0, n, batch):
        rows = filler(min(batch, n - lo), lo)
        added = store.append_turns(ns, [Turn(id=r["id"], text=r["text"], speaker="user") for r in rows]).added
        store.put_items(ns, "turn", [NewItem(t.id, turn_words(t), {}, [t.seq or 0], 20) for t in added])
        ids = store.item_ids(ns, "turn", [t.id for t in added])
        vectors = memory.embedder.embed([t.text for t in added])
        store.put_vectors(
            ns,
            "turn",
            memory.embedder.name,
            [(ids[t.id], text_hash(t.text), v) for t, v in zip(added, vectors, strict=True)],
        )
    if build is not None:
        del store._maybe_index
        with store._write() as c:
            build(c, ns, "turn", memory.embedder.name, memory.embedder.dim)


def pg_cost(sizes: list[int]) -> list[dict[str, Any]]:
    """Per size: a fresh database with that many turns in one namespace (items and vectors, an HNSW index past
    20k), one turn deleted, then the scrub's statements timed one by one (VACUUM FULL of each partition that held
    deleted rows, then CHECKPOINT): each partition is locked ACCESS EXCLUSIVE for its own VACUUM FULL only."""
    import psycopg

    from cuemem.store.postgres_scrub import _in_table_order

    pg = Pg()
    out = []
    for n in sizes:
        dsn = pg.database(f"cost_{n}")
        memory = Memory(dsn, engine="hybrid", embedder=HashingEmbedder())
        memory.store._scrubber.delay = 3600  # type: ignore[attr-defined]  # (timed by hand below)
        start = time.perf_counter()
        bulk_load(memory, n)
        load_s = time.perf_counter() - start
        memory.delete("f1", user_id="bench")
        tables = vacuum_timed(dsn, _in_table_order(memory.store._scrubber._tables))  # type: ignore[attr-defined]
        with psycopg.connect(dsn, autocommit=True) as conn:
            t0 = time.perf_counter()
            conn.execute("CHECKPOINT")
            checkpoint_s = time.perf_counter() - t0
        memory.store._scrubber.done()  # type: ignore[attr-defined]
        memory.close()
        row = {
            "turns": n,
            "load_s": round(load_s, 1),
            "scrub_s": round(sum(t["seconds"] for t in tables.values()) + checkpoint_s, 3),
            "longest_lock_s": max(t["seconds"] for t in tables.values()),
            "checkpoint_s": round(checkpoint_s, 3),
            "tables": tables,
        }
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def vacuum_timed(dsn: str, tables: list[str]) -> dict[str, dict[str, float]]:
    """VACUUM FULL of each of `tables` (cuemem's tables or partitions), timed: its size before and its seconds."""
    import psycopg

    timed = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in tables:
            size = conn.execute("SELECT pg_total_relation_size(%s)", (f"cuemem.{table}",)).fetchone()[0]
            t0 = time.perf_counter()
            conn.execute(f"VACUUM FULL cuemem.{table}")
            timed[table] = {"mb": round(size / 2**20, 1), "seconds": round(time.perf_counter() - t0, 3)}
    return timed


def scrub_probed(
    memory: Memory, where: dict[str, str], elsewhere: dict[str, str], nearby: dict[str, str]
) -> tuple[list[str], float, list[float], list[float]]:
    """Add a turn to `where` and delete it; time the scrub while `elsewhere` is searched in a loop and `nearby` once:
    the partitions rewritten, the scrub's seconds, and the searches' seconds."""
    import threading

    store: Any = memory.store
    probe = f"scrub-probe-{secrets.token_hex(4)}"
    memory.add({"id": probe, "text": f"a secret to forget {probe}"}, **where)
    memory.delete(probe, **where)
    pending = sorted(store._scrubber._tables)
    latencies: list[float] = []
    blocked: list[float] = []
    stop = threading.Event()

    def search_elsewhere() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            memory.search("hotel near the river", **elsewhere)
            latencies.append(time.perf_counter() - t0)
            time.sleep(0.05)

    def search_nearby() -> None:
        time.sleep(0.5)
        t0 = time.perf_counter()
        memory.search("hotel near the river", **nearby)
        blocked.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=search_elsewhere), threading.Thread(target=search_nearby)]
    for thread in threads:
        thread.start()
    t0 = time.perf_counter()
    assert store._scrubber.flush(), "the scrub left rows behind"
    scrub_s = time.perf_counter() - t0
    stop.set()
    for thread in threads:
        thread.join()
    return pending, scrub_s, latencies, blocked


def scope(namespace: Any) -> dict[str, str]:
    return {"user_id": namespace.user_id, "agent_id": namespace.agent_id, "run_id": namespace.run_id}


def pg_scrub(dsn: str, probes: int) -> dict[str, Any]:
    """On an existing store (production.py's 1M turns over 10,000 namespaces): open it (a schema-1 store is
    migrated to partitions first: timed), then for the largest namespace and `probes` - 1 others: add one turn,
    delete it, and time the store's own scrub (`flush`) while a namespace in another partition is searched in a
    loop and one in the same partition is searched once: what waits for the scrub and what does not. The store's
    rows are the same afterwards (each probe deletes the turn it added)."""

    start = time.perf_counter()
    memory = Memory(dsn, engine="bm25", embedder=HashingEmbedder(), scrub_after_s=3600)
    open_s = time.perf_counter() - start
    store: Any = memory.store
    sizes = store._query("SELECT ns, COUNT(*) FROM turns GROUP BY ns ORDER BY 2 DESC")
    rows = store._query("SELECT id, user_id, agent_id, run_id FROM namespaces")
    names = {int(i): store._namespace(u, a, r) for i, u, a, r in rows}
    step = max(1, len(sizes) // max(1, probes))
    chosen = [int(sizes[i][0]) for i in range(0, len(sizes), step)][:probes]
    counts = {int(n): int(c) for n, c in sizes}
    with store.snapshot():
        suffix = {ns: store.partition_of(store._bound.conn, ns) for ns in names}
    rows = []
    for ns in chosen:
        other = next(o for o, _ in sizes[::-1] if suffix[int(o)] != suffix[ns])  # a small one elsewhere
        same = next(o for o, _ in sizes[::-1] if suffix[int(o)] == suffix[ns] and int(o) != ns)
        where, elsewhere, nearby = (scope(names[int(n)]) for n in (ns, other, same))
        memory.search("warm up", **elsewhere)
        memory.search("warm up", **nearby)
        pending, scrub_s, latencies, blocked = scrub_probed(memory, where, elsewhere, nearby)
        row = {
            "turns_in_namespace": counts.get(ns, 0),
            "partitions_rewritten": pending,
            "scrub_s": round(scrub_s, 2),
            "other_partition_search_ms_p50": round(1000 * statistics.median(latencies), 1) if latencies else None,
            "other_partition_search_ms_max": round(1000 * max(latencies), 1) if latencies else None,
            "other_partition_searches": len(latencies),
            "same_partition_search_s": round(blocked[0], 2) if blocked else None,
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    memory.close()
    return {"open_s": round(open_s, 1), "namespaces": len(names), "turns": sum(counts.values()), "probes": rows}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    lat = sub.add_parser("latency", help="seconds from an HTTP delete until the text is off the disk")
    lat.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    lat.add_argument("--turns", type=int, default=2000, help="other turns in the store")
    lat.add_argument("--reps", type=int, default=5)
    lat.add_argument("--scrub-after", type=float, default=None, help="the delay (default: the store's)")
    cost = sub.add_parser("pg-cost", help="what the PostgreSQL scrub costs at given sizes")
    cost.add_argument("--turns", default="10000,100000", help="comma-separated store sizes")
    probe = sub.add_parser("pg-scrub", help="a delete's scrub in an existing store, and who waits for it")
    probe.add_argument("dsn", help="the store (e.g. production.py's database)")
    probe.add_argument("--probes", type=int, default=3, help="namespaces probed, the largest first")
    probe.add_argument("--result", type=Path, help="write the summary here as JSON")
    args = parser.parse_args(argv)
    if args.command == "latency":
        print(json.dumps(latency(args.store, args.turns, args.reps, args.scrub_after)))
    elif args.command == "pg-cost":
        pg_cost([int(n) for n in args.turns.split(",")])
    else:
        summary = pg_scrub(args.dsn, args.probes)
        print(json.dumps(summary))
        if args.result:
            args.result.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
