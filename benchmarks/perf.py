"""Speed and memory of the foundation: ingest throughput, search latency, peak memory, backend choices.

    python benchmarks/perf.py --turns 5000 --sizes 10000,100000 --out bench-out/perf.json

Each phase runs in its own subprocess so that its peak RSS is its own. Turn text comes from LoCoMo
(locomo/locomo10.json under the datasets setting or --datasets DIR, 5,882 turns) when present, else from a synthetic
generator; queries are LoCoMo's questions. Larger stores repeat the LoCoMo turns under new ids (the repeated
documents hit the embedding cache, so building the 100k store is quick; search cost depends on store size, not on
uniqueness)."""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from data_paths import LOCOMO, add_datasets_option, apply_datasets_option, dataset_file  # noqa: E402

from cuemem.bench.metrics import percentile  # noqa: E402


def source_turns() -> tuple[list[dict], list[str]]:
    """(turn dicts, questions): LoCoMo's when available, else synthetic look-alikes."""
    locomo = dataset_file(LOCOMO)
    if locomo.is_file():
        from cuemem.formats import locomo_turns, read_locomo

        turns, questions = [], []
        for sample in read_locomo(locomo):
            for t in locomo_turns(sample):
                turns.append(
                    {"id": t.id, "text": t.text, "speaker": t.speaker, "timestamp": t.timestamp, "metadata": t.metadata}
                )
            questions += [qa["question"] for qa in sample["qa"]]
        return turns, questions
    rng = random.Random(0)
    things = ["hotel", "flight", "dinner", "concert", "museum", "car", "tour", "spa"]
    turns = [
        {
            "id": f"x{i}",
            "text": f"Day {rng.randint(1, 9)} {rng.choice(things)} costs {rng.randint(20, 400)} euros",
            "speaker": rng.choice(["A", "B"]),
        }
        for i in range(6000)
    ]
    questions = [f"how much is the {rng.choice(things)} on day {rng.randint(1, 9)}" for _ in range(200)]
    return turns, questions


def turns_for(n: int) -> list[dict]:
    base, _ = source_turns()
    out = []
    for i in range(n):
        t = dict(base[i % len(base)])
        t["id"] = f"t{i}"  # LoCoMo's dia_ids repeat across conversations: ids here must be unique
        out.append(t)
    return out


def prebuilt_store(db: Path, engine: str, size: int, cache: Path, queries: int) -> tuple[Any, list[str], str]:
    """A store of `size` turns (turns_for) indexed by `engine` with MiniLM embeddings cached in `cache`, built once
    at `db` (a `.built` file beside it names what it holds, so a rerun is a fresh process on the same store), and
    `queries` questions sampled from the source with their vectors cached before any timing: (the cached embedder,
    the questions, the source's name). A `db` holding another store is an error (SystemExit with its message)."""
    from cuemem import Memory
    from cuemem.embed import MiniLMEmbedder
    from cuemem.embed.cached import CachedEmbedder

    source = "LoCoMo" if dataset_file(LOCOMO).is_file() else "synthetic look-alike"
    embedder = CachedEmbedder(MiniLMEmbedder(), cache)
    built = db.with_suffix(".built")
    stamp = f"{engine} {size} {source}\n"
    if built.exists() and built.read_text() != stamp:
        raise SystemExit(f"{db} holds another store ({built.read_text().strip()}): remove it or name another --db")
    if not built.exists():
        db.parent.mkdir(parents=True, exist_ok=True)
        with Memory(db, engine=engine, embedder=embedder) as memory:
            turns = turns_for(size)
            for start in range(0, len(turns), 1024):
                memory.add(turns[start : start + 1024], user_id="bench")
        built.write_text(stamp)
    _, questions = source_turns()
    rng = random.Random(1)
    sample = [rng.choice(questions) for _ in range(queries)]
    embedder.embed_query(sample)
    return embedder, sample, source


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def p50_p95(search: Callable[[Any], object], queries: Iterable[Any]) -> tuple[float, float]:
    """Median and 95th-percentile milliseconds of `search(q)` over the queries."""
    lat = []
    for q in queries:
        start = time.perf_counter()
        search(q)
        lat.append((time.perf_counter() - start) * 1000)
    return percentile(lat, 50), percentile(lat, 95)


# --------------------------------------------------------------------------- phases (each in a subprocess)
def phase_ingest(engine: str, n: int) -> dict:
    from cuemem import Memory

    turns = turns_for(n)
    with tempfile.TemporaryDirectory() as tmp, Memory(Path(tmp) / "b.db", engine=engine) as memory:
        if engine in ("dense", "hybrid"):
            memory.embedder.embed(["warm up"])  # model load is not ingest
        start = time.perf_counter()
        for i in range(0, n, 256):
            memory.add(turns[i : i + 256], user_id="bench")
        seconds = time.perf_counter() - start
        stored = memory.store.count_turns(memory.store.namespace_id(memory.namespace("bench")))
    assert stored == n, f"stored {stored} of {n} turns"
    return {"engine": engine, "turns": n, "seconds": seconds, "turns_per_s": n / seconds, "peak_rss_mb": peak_mb()}


def phase_build(n: int, db: str) -> dict:
    from cuemem import Memory

    turns = turns_for(n)
    start = time.perf_counter()
    with Memory(db, engine="hybrid") as memory:
        for i in range(0, n, 1024):
            memory.add(turns[i : i + 1024], user_id="bench")
        stored = memory.store.count_turns(memory.store.namespace_id(memory.namespace("bench")))
        for engine in ("bm25", "dense"):  # every engine catches up now, so searches measure searching
            memory.search("warm up", user_id="bench", engine=engine)
    assert stored == n, f"stored {stored} of {n} turns"
    return {"turns": n, "seconds": time.perf_counter() - start, "peak_rss_mb": peak_mb(), "db_mb": _size_mb(db)}


def _size_mb(db: str) -> float:
    return sum(Path(p).stat().st_size for p in (db, db + "-wal") if Path(p).exists()) / 2**20


def phase_search(engine: str, db: str, queries: int) -> dict:
    from cuemem import Memory

    _, questions = source_turns()
    rng = random.Random(1)
    sample = [rng.choice(questions) for _ in range(queries)]
    with Memory(db, engine="hybrid") as memory:
        start = time.perf_counter()
        memory.search(sample[0], user_id="bench", k=10, engine=engine)  # builds the in-memory index
        first = time.perf_counter() - start
        latencies = []
        for q in sample:
            start = time.perf_counter()
            memory.search(q, user_id="bench", k=10, engine=engine, budget_tokens=4096)
            latencies.append(time.perf_counter() - start)
        size = memory.store.count_turns(memory.store.namespace_id(memory.namespace("bench")))
    ms = [x * 1000 for x in latencies]
    return {
        "engine": engine,
        "stored_turns": size,
        "first_query_ms": first * 1000,
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "mean_ms": statistics.mean(ms),
        "queries": len(ms),
        "peak_rss_mb": peak_mb(),
    }


def phase_backends(n: int, queries: int) -> dict:
    """Candidate implementations of the two searches, on the same data: which one the store uses, and why."""
    from cuemem.index.bm25 import BM25Index
    from cuemem.index.text import analyze
    from cuemem.store.vectors import DenseIndex

    turns = turns_for(n)
    _, questions = source_turns()
    rng = random.Random(2)
    qs = [rng.choice(questions) for _ in range(queries)]
    out: dict = {"turns": n}

    # Lexical: our in-memory BM25 vs SQLite FTS5's bm25() with a namespace column.
    texts = [f"{t['speaker']}: {t['text']}" for t in turns]
    start = time.perf_counter()
    index = BM25Index()
    for i, text in enumerate(texts):
        index.add(i, text)
    out["bm25_build_s"] = time.perf_counter() - start
    out["bm25_memory_p50_ms"], out["bm25_memory_p95_ms"] = p50_p95(lambda q: index.search(q, 10), qs)

    con = sqlite3.connect(":memory:")
    con.execute("CREATE VIRTUAL TABLE f USING fts5(text, ns UNINDEXED)")
    start = time.perf_counter()
    con.executemany("INSERT INTO f(rowid, text, ns) VALUES(?,?,1)", list(enumerate(texts)))
    out["fts5_build_s"] = time.perf_counter() - start
    fts_sql = "SELECT rowid, bm25(f) FROM f WHERE f MATCH ? AND ns = 1 ORDER BY bm25(f) LIMIT 10"
    fts_queries = [" OR ".join(f'"{w}"' for w in set(analyze(q))) for q in qs]
    out["fts5_p50_ms"], out["fts5_p95_ms"] = p50_p95(
        lambda terms: con.execute(fts_sql, (terms,)).fetchall(), [t for t in fts_queries if t]
    )

    # Dense: a cached numpy matrix vs sqlite-vec's vec0 (brute force, namespace as a partition key).
    vecs = np.random.default_rng(3).standard_normal((n, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    qv = np.random.default_rng(4).standard_normal((queries, 384)).astype(np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    dense = DenseIndex()
    for i in range(n):
        dense.add(i, vecs[i])
    dense.matrix()
    out["numpy_p50_ms"], out["numpy_p95_ms"] = p50_p95(lambda q: dense.search(q, 10), qv)
    try:
        import sqlite_vec

        con = _extension_connection()
        con.enable_load_extension(True)
        con.load_extension(sqlite_vec.loadable_path())
        con.execute(
            "CREATE VIRTUAL TABLE v USING vec0(ns integer partition key, embedding float[384] distance_metric=cosine)"
        )
        rows = [(i, vecs[i].tobytes()) for i in range(n)]
        start = time.perf_counter()
        con.execute("BEGIN")
        con.executemany("INSERT INTO v(rowid, ns, embedding) VALUES(?, 1, ?)", rows)
        con.execute("COMMIT")
        out["sqlite_vec_build_s"] = time.perf_counter() - start
        knn = "SELECT rowid, distance FROM v WHERE embedding MATCH ? AND k = 10 AND ns = 1"
        out["sqlite_vec_p50_ms"], out["sqlite_vec_p95_ms"] = p50_p95(
            lambda q: con.execute(knn, (q.tobytes(),)).fetchall(), qv
        )
        out["sqlite_vec_version"] = con.execute("SELECT vec_version()").fetchall()[0][0]
    except (ImportError, AttributeError, RuntimeError) as exc:
        out["sqlite_vec_error"] = f"{type(exc).__name__}: {exc}"
    return out


def _extension_connection():
    """A SQLite connection that may load extensions: the stdlib's when built with that, else apsw's."""
    probe = sqlite3.connect(":memory:")
    if hasattr(probe, "enable_load_extension"):
        return probe
    try:
        import apsw
    except ImportError as exc:
        raise RuntimeError(
            "this Python's sqlite3 cannot load extensions; pip install apsw to measure sqlite-vec"
        ) from exc
    return apsw.Connection(":memory:")


# --------------------------------------------------------------------------- driver
def run_phase(*args: str) -> dict:
    cmd = [sys.executable, __file__, "--phase", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"phase {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=5000, help="turns ingested per engine for throughput")
    parser.add_argument("--sizes", default="10000,100000", help="store sizes for search latency")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--engines", default="fullcontext,bm25,dense,hybrid")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: ingest,search,backends")
    parser.add_argument("--out", default="bench-out/perf.json")
    parser.add_argument("--phase", nargs="+", help=argparse.SUPPRESS)
    add_datasets_option(parser)
    args = parser.parse_args()
    apply_datasets_option(args)

    if args.phase:
        name, *rest = args.phase
        if name == "ingest":
            result = phase_ingest(rest[0], int(rest[1]))
        elif name == "build":
            result = phase_build(int(rest[0]), rest[1])
        elif name == "search":
            result = phase_search(rest[0], rest[1], int(rest[2]))
        else:
            result = phase_backends(int(rest[0]), int(rest[1]))
        print(json.dumps(result))
        return

    skip = set(filter(None, args.skip.split(",")))
    report: dict = {
        "machine": {"cores": os.cpu_count(), "python": sys.version.split()[0]},
        "source": str(dataset_file(LOCOMO)),
    }
    if "ingest" not in skip:
        report["ingest"] = []
        for engine in args.engines.split(","):
            r = run_phase("ingest", engine, str(args.turns))
            print(f"ingest {engine:12s} {r['turns_per_s']:8.1f} turns/s  peak {r['peak_rss_mb']:.0f} MB", flush=True)
            report["ingest"].append(r)
    if "search" not in skip:
        report["search"] = []
        report["build"] = []
        with tempfile.TemporaryDirectory() as tmp:
            for size in [int(s) for s in args.sizes.split(",")]:
                db = str(Path(tmp) / f"s{size}.db")
                b = run_phase("build", str(size), db)
                print(f"build {size} turns: {b['seconds']:.1f} s, store {b['db_mb']:.0f} MB", flush=True)
                report["build"].append(b)
                for engine in ("bm25", "dense", "hybrid"):
                    r = run_phase("search", engine, db, str(args.queries))
                    print(
                        f"search {size:>7} {engine:7s} p50 {r['p50_ms']:6.1f} ms  p95 {r['p95_ms']:6.1f} ms"
                        f"  first {r['first_query_ms']:7.0f} ms  peak {r['peak_rss_mb']:.0f} MB",
                        flush=True,
                    )
                    report["search"].append(r)
    if "backends" not in skip:
        size = max(int(s) for s in args.sizes.split(","))
        report["backends"] = run_phase("backends", str(size), str(args.queries))
        print(json.dumps(report["backends"], indent=1), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
